"""How a client reaches a run's lab, and what the runner sees of it: over HTTP through
the wire tap (:mod:`mcp_lab.runners.wire`) in front of the lab's server, or over stdio
through the stdio tap (:mod:`mcp_lab.runners.stdio_tap`) in front of a lab server the
client starts itself.

Either way the runner gets the same three things: what to tell the client (a URL, or a
command line), the wire capture of both directions, and the log lines of the server
the client talks to (to wait on a subscribe, and to keep). A stdio server runs the
code of this runner and the lab's Redis and settings, whatever the client passes on.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from mcp_lab.runners.lab import RunLab
from mcp_lab.runners.wire import WireMessage, WireTap, from_jsonl

HTTP, STDIO = "http", "stdio"
LAB_SERVER = [sys.executable, "-m", "mcp_lab", "server", "--transport", "stdio"]
# The taps run this runner's own code, wherever a client or bridge starts them (its
# cwd and environment are its own, and an editable install elsewhere would win).
_SOURCE = str(Path(__file__).resolve().parents[2])
TAP = [
    sys.executable,
    "-c",
    f"import sys; sys.path.insert(0, {_SOURCE!r}); "
    "from mcp_lab.runners.stdio_tap import main; sys.exit(main())",
]
# The lab's environment its stdio server needs (the rest is the client's own);
# PYTHONPATH: it runs the code the lab's other processes run.
_LAB_KEYS = re.compile(r"^(REDIS_URL|MCP_TEST_\w+|PYTHONUNBUFFERED|PYTHONPATH)$")
_POLL_SECONDS = 0.05


def stdio_server(lab: RunLab, folder: Path, log: bool = True) -> list[str]:
    """The command line that starts the lab as a stdio server behind the stdio tap: its
    wire in ``folder/wire-lab.jsonl``; its log in ``folder/lab-server.log`` (``log``),
    else on the stderr of whoever starts it."""
    env_file = folder / "lab-env.json"
    env_file.write_text(json.dumps({k: v for k, v in lab.env.items() if _LAB_KEYS.match(k)}))
    tap = ["--out", str(folder / "wire-lab.jsonl"), "--env-file", str(env_file)]
    if log:
        tap += ["--log", str(folder / "lab-server.log")]
    return [*TAP, *tap, "--", *LAB_SERVER]


class LogFile:
    """The lines a process appends to a file (a stdio server the client started), read
    as they come: :meth:`wait_for_index` as :class:`mcp_lab.runners.program.Process`
    has it, bounded, looking at the file every 50 ms (nothing signals a write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        self._offset = 0
        self._partial = b""

    def read(self) -> list[str]:
        """The lines written so far."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return self.lines
        self._offset += len(data)
        *complete, self._partial = (self._partial + data).split(b"\n")
        self.lines += [line.decode("utf-8", "replace") for line in complete]
        return self.lines

    async def wait_for_index(self, pattern: str, timeout: float, since: int = 0) -> int:
        """The index of the first line from ``since`` that matches ``pattern``;
        TimeoutError naming the last lines if none comes within ``timeout`` s."""
        regex = re.compile(pattern)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        index = since
        while True:
            lines = self.read()
            for offset, line in enumerate(lines[index:]):
                if regex.search(line):
                    return index + offset
            index = max(index, len(lines))
            if loop.time() >= deadline:
                tail = "\n".join(lines[-20:])
                raise TimeoutError(
                    f"{self.path.name}: no line matching {pattern!r} within {timeout}s; "
                    f"last lines:\n{tail}"
                )
            await asyncio.sleep(_POLL_SECONDS)

    async def wait_for(self, pattern: str, timeout: float, since: int = 0) -> str:
        return self.lines[await self.wait_for_index(pattern, timeout, since)]


@dataclass
class LabSide:
    """The lab as one client reaches it (see the module docstring)."""

    transport: str
    url: str  # the MCP URL to give the client ("" over stdio)
    command: list[str]  # the stdio server's command line ([] over http)
    log: RunLab | LogFile  # whose .lines and wait_for_index show the server's log
    _tap: WireTap | None = None
    _wire_file: Path | None = None

    @property
    def lines(self) -> list[str]:
        """The log lines of the server the client talks to, so far."""
        return self.log.http_server.lines if isinstance(self.log, RunLab) else self.log.read()

    async def wait_for_index(self, pattern: str, timeout: float, since: int = 0) -> int:
        if isinstance(self.log, RunLab):
            return await self.log.http_server.wait_for_index(pattern, timeout, since)
        return await self.log.wait_for_index(pattern, timeout, since)

    async def wait_for(self, pattern: str, timeout: float, since: int = 0) -> str:
        return self.lines[await self.wait_for_index(pattern, timeout, since)]

    def wire(self) -> list[WireMessage]:
        """Both directions, as the tap saw them."""
        if self._tap is not None:
            return self._tap.messages
        assert self._wire_file is not None
        if not self._wire_file.exists():
            return []
        return from_jsonl(self._wire_file.read_text())


@asynccontextmanager
async def reach(lab: RunLab, transport: str, folder: Path) -> AsyncIterator[LabSide]:
    """The lab as a client reaches it over ``transport``, for as long as the block runs;
    a stdio side's files (wire, log, environment) go in ``folder``."""
    if transport == STDIO:
        folder.mkdir(parents=True, exist_ok=True)
        command = stdio_server(lab, folder)
        log = LogFile(folder / "lab-server.log")
        yield LabSide(STDIO, "", command, log, _wire_file=folder / "wire-lab.jsonl")
        return
    tap = WireTap(lab.base_url)
    async with tap.serve() as tap_url:
        yield LabSide(HTTP, f"{tap_url}/mcp", [], lab, _tap=tap)
