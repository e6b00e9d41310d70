"""A CLI in a pseudo-terminal: keystrokes in, its screen's text out.

Some things a CLI does only in its interactive UI (Claude Code attaches a resource
named ``@server:uri`` only when the mention is typed into its prompt box). This runs
such a CLI under a pseudo-terminal of a fixed size, types into it as a person would,
and keeps everything it draws as plain text (escape sequences dropped), which can be
waited for. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import signal
import struct
import termios
from pathlib import Path

# CSI (colours, cursor moves), OSC (titles, links) and the other two-byte escapes.
_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_READ_BYTES = 65536
_STOP_SECONDS = 10.0
KEY_ENTER, KEY_BACKSPACE, KEY_CTRL_D = "\r", "\x7f", "\x04"


# "Cursor forward n": what a UI draws instead of a run of spaces.
_FORWARD = re.compile(rb"\x1b\[(\d*)C")


def plain(raw: bytes) -> str:
    """What a screen draws, without its escape sequences and carriage returns (a
    cursor moved forward reads as that many spaces)."""
    spaced = _FORWARD.sub(lambda m: b" " * int(m.group(1) or 1), raw)
    return _ESCAPES.sub(b"", spaced).replace(b"\r", b"").decode("utf-8", "replace")


def loosely(text: str) -> str:
    """A pattern for ``text`` as a screen may draw it: each run of spaces any run of
    white space, or none (a UI may draw a gap by moving the cursor)."""
    return r"\s*".join(re.escape(word) for word in text.split())


class Terminal:
    """One CLI process on a pseudo-terminal (see the module docstring)."""

    def __init__(self, process: asyncio.subprocess.Process, master: int) -> None:
        self.process = process
        self._master = master
        self._raw = bytearray()
        self._changed = asyncio.Event()
        self._closed = False
        asyncio.get_running_loop().add_reader(master, self._read)

    @classmethod
    async def start(
        cls,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        columns: int = 140,
        rows: int = 45,
    ) -> Terminal:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env={**env, "COLUMNS": str(columns), "LINES": str(rows)},
                cwd=cwd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
            )
        finally:
            os.close(slave)
        return cls(process, master)

    def _read(self) -> None:
        try:
            chunk = os.read(self._master, _READ_BYTES)
        except OSError:  # the other side is gone (EIO on Linux)
            chunk = b""
        if not chunk:
            self._close_reader()
        else:
            self._raw += chunk
        self._changed.set()

    def _close_reader(self) -> None:
        if not self._closed:
            self._closed = True
            asyncio.get_running_loop().remove_reader(self._master)

    @property
    def text(self) -> str:
        """Everything drawn so far, as text."""
        return plain(bytes(self._raw))

    def mark(self) -> int:
        """A place in the output: :meth:`wait_for` looks only after it."""
        return len(self._raw)

    async def wait_for(self, pattern: str, timeout: float, since: int = 0) -> bool:
        """Whether ``pattern`` was drawn after ``since`` within ``timeout`` seconds."""
        regex = re.compile(pattern)

        async def find() -> None:
            while not regex.search(plain(bytes(self._raw[since:]))):
                if self._closed:
                    raise EOFError
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(find(), timeout)
        except (TimeoutError, EOFError):
            return False
        return True

    async def type(self, text: str, per_key: float = 0.01) -> None:
        """Type ``text`` a key at a time (an interactive UI may drop a burst)."""
        for key in text:
            os.write(self._master, key.encode())
            await asyncio.sleep(per_key)  # a typist's pace, not a wait for anything

    def press(self, key: str) -> None:
        os.write(self._master, key.encode())

    async def stop(self) -> int:
        """End the process (SIGTERM, then SIGKILL after a bound); its exit code."""
        if self.process.returncode is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, sig)
                try:
                    await asyncio.wait_for(self.process.wait(), _STOP_SECONDS)
                    break
                except TimeoutError:
                    continue
        self._close_reader()
        with contextlib.suppress(OSError):
            os.close(self._master)
        return self.process.returncode if self.process.returncode is not None else -1
