"""A runner's program (a client, a bridge, a lab process): its output kept, its end bounded.

:class:`Process` runs a child in a session of its own with its output lines kept, so a
runner can wait for a line and keep the logs; :func:`base_env` is the clean
environment a client or bridge runs in (a HOME of the run's own); :func:`end_strays`
kills what a run left running in its folder once it is over.

A child ends with the runner, however the runner ends: it gets SIGTERM when the thread
that started it dies (Linux's parent-death signal, :mod:`mcp_lab.process.lifeline`),
so a runner killed mid-run (Ctrl-C twice, a CI job's timeout, SIGKILL) leaves no lab,
client or bridge behind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from mcp_lab.process.lifeline import die_with_parent

_STOP_TIMEOUT = 10.0
# A run being cancelled (Ctrl-C) gives its processes this long, not _STOP_TIMEOUT: the
# command ends within seconds, and a process that does not stop by then is killed.
_HURRIED_STOP_TIMEOUT = 1.5
LINE_LIMIT = 1024 * 1024  # a longer output line is left out (a minified stack trace)
KEPT_LINE_CHARS = 10_000  # of a client's output line, kept at most (the rest counted)
CLIENT_LINES = 4_000  # lines of a client's output kept at most (the first and newest half)


class Process:
    """A child process whose output lines are kept and can be waited for.

    With ``keep`` (a client's output, which the lab does not control), at most that
    many lines are held: the first half and the newest half, each cut to
    :data:`KEPT_LINE_CHARS`, and a count of those left out between them
    (:attr:`left_out`); ``lines`` then reads them with a line saying how many were left
    out. Without it (the lab's own processes) every line is kept, and an index into
    ``lines`` stays one."""

    def __init__(
        self, name: str, process: asyncio.subprocess.Process, keep: int | None = None
    ) -> None:
        self.name = name
        self.process = process
        self._lines: list[str] = []
        self._keep = keep
        self._tail: collections.deque[str] = collections.deque(maxlen=max(1, (keep or 2) // 2))
        self.left_out = 0
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    @property
    def lines(self) -> list[str]:
        if self._keep is None:
            return self._lines
        if not self.left_out:
            return [*self._lines, *self._tail]
        gap = f"[{self.left_out} line(s) of output left out here; the first and newest are kept]"
        return [*self._lines, gap, *self._tail]

    def _take(self, line: str) -> None:
        if self._keep is None:
            self._lines.append(line)
            return
        if len(line) > KEPT_LINE_CHARS:
            line = f"{line[:KEPT_LINE_CHARS]}...({len(line)} chars)"
        if len(self._lines) < self._keep // 2:
            self._lines.append(line)
            return
        if len(self._tail) == self._tail.maxlen:
            self.left_out += 1
        self._tail.append(line)

    @classmethod
    async def start(
        cls, name: str, argv: list[str], env: dict[str, str], cwd: Path, keep: int | None = None
    ) -> Process:
        """Start ``argv`` in a session of its own, ending with the calling thread (its
        output held as ``keep`` says: see the class)."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            limit=LINE_LIMIT,
            preexec_fn=die_with_parent(),
        )
        return cls(name, process, keep)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while True:
            try:
                raw = await self.process.stdout.readline()
            except ValueError:  # a line over LINE_LIMIT: asyncio has dropped it
                raw = f"[a line over {LINE_LIMIT} bytes left out]\n".encode()
            if not raw:
                break
            async with self._changed:
                self._take(raw.decode("utf-8", "replace").rstrip("\n"))
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, pattern: str, timeout: float, since: int = 0) -> str:
        """The first line from index ``since`` that matches ``pattern``; raises
        TimeoutError (with the last lines) if none comes in ``timeout`` seconds."""
        return self.lines[await self.wait_for_index(pattern, timeout, since)]

    async def wait_for_index(self, pattern: str, timeout: float, since: int = 0) -> int:
        """The index of the first line from ``since`` that matches ``pattern`` (see
        :meth:`wait_for`)."""
        regex = re.compile(pattern)
        index = since

        async def find() -> int:
            nonlocal index
            async with self._changed:
                while True:
                    for offset, line in enumerate(self.lines[index:]):
                        if regex.search(line):
                            return index + offset
                    index = len(self.lines)
                    if self._reader.done():
                        raise EOFError
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(find(), timeout)
        except (TimeoutError, EOFError) as exc:
            tail = "\n".join(self.lines[-20:])
            raise TimeoutError(
                f"{self.name}: no line matching {pattern!r} within {timeout}s "
                f"(exit code {self.process.returncode}); last lines:\n{tail}"
            ) from exc

    async def stop(self) -> int:
        """SIGINT the process group, SIGKILL after a bound (a short one when the
        calling task is being cancelled); returns the exit code."""
        bound = _HURRIED_STOP_TIMEOUT if cancelling() else _STOP_TIMEOUT
        if self.process.returncode is None:
            for sig in (signal.SIGINT, signal.SIGKILL):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    await asyncio.wait_for(self.process.wait(), bound)
                    break
                except TimeoutError:
                    continue
        await asyncio.wait_for(self._reader, _STOP_TIMEOUT)
        return self.process.returncode if self.process.returncode is not None else -1


def cancelling() -> bool:
    """Whether the calling task is being cancelled (a Ctrl-C on the runner)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def base_env(home: Path, extra_path: list[Path]) -> dict[str, str]:
    """A clean environment: nothing of the caller's but PATH, HOME of the run's own
    (the bridges runner starts its bridges in one too)."""
    path = os.pathsep.join([*(str(p) for p in extra_path), os.environ.get("PATH", "")])
    env = {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(home / "tmp"),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    return env


@contextlib.contextmanager
def run_folder(name: str, say: Callable[[str], None], what: str) -> Iterator[Path]:
    """A temporary folder for one run of ``name``; once the run is over, however it
    ends (a Ctrl-C too), what still runs in it is killed (:func:`end_strays`), and
    ``say`` names it as ``what``'s."""
    with tempfile.TemporaryDirectory(prefix=f"mcp-lab-{name}-") as root:
        try:
            yield Path(root)
        finally:
            left = end_strays(Path(root))
            if left:
                say(f"{what}: killed what it left running: {'; '.join(left)}")


def end_strays(root: Path) -> list[str]:
    """Kill every process of this user still running in a run's folder ``root`` (its
    working folder or its HOME there) once the run is over: a program's daemon that
    left its session, and so the process group :meth:`Process.stop` ends (cline's
    hub daemon did). Each killed as ``PID argv``; none where there is no ``/proc``."""
    proc, mine, me = Path("/proc"), os.getuid(), os.getpid()
    inside = os.path.realpath(root)
    killed = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != mine:
                continue
            cwd = os.readlink(entry / "cwd")  # a zombie has none: it is gone already
            environ = (entry / "environ").read_bytes().split(b"\0")
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:
            continue
        home = next((os.fsdecode(v[5:]) for v in environ if v.startswith(b"HOME=")), "")
        if not any(_within(path, inside) for path in (cwd, home)):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(f"{entry.name} {argv.decode('utf-8', 'replace')[:200]}")
    return killed


def _within(path: str, root: str) -> bool:
    return bool(path) and (path == root or path.startswith(root + os.sep))
