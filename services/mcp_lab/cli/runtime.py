"""Where the running ``mcp-lab up`` labs are: their runtime files, and finding a lab's Redis.

While ``up`` runs, it keeps a runtime file in the per-user state directory
(``$XDG_STATE_HOME/mcp-lab``, default ``~/.local/state/mcp-lab``): its own pid,
its Redis URL and where that Redis keeps its data, its URLs (MCP, legacy SSE, the
server's base URL) and the pids of its children, each with its start time so a
reused pid is never taken for one of them. The first ``up`` keeps ``up.json``; one
started beside it (another lab, on another server port) keeps ``up-PORT.json``,
PORT its server's port. Every command that talks to a lab finds it there
(:func:`find_redis`, :func:`find_server`, :mod:`mcp_lab.cli.where`): with several
running, the one on the default port (8089) if it runs, else the oldest, unless
``MCP_TEST_PORT`` names another. ``up`` removes its own file when it stops; a file
whose ``up`` is dead is what a killed ``up`` left behind.

The embedded Redis keeps its data in ``$XDG_DATA_HOME/mcp-lab/redis`` (default
``~/.local/share/mcp-lab/redis``) unless told otherwise; a lab started beside one
that has that folder keeps its data in ``redis-PORT`` beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp_lab.process.dirs import state_dir
from mcp_lab.settings import LabSettings

RUNTIME_FILE = "up.json"
_BESIDE_FILES = "up-*.json"  # up-PORT.json: an up started beside the first one
_LOCK_FILE = "up.lock"
_STOP_SECONDS = 5.0
_POLL_SECONDS = 0.05
DEFAULT_PORT: int = LabSettings.model_fields["port"].default


def runtime_file(port: int | None = None) -> Path:
    """``up.json`` (the first up's), or ``up-PORT.json`` for an up on ``port`` beside it."""
    return state_dir() / (RUNTIME_FILE if port is None else f"up-{port}.json")


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    # after the name: state is field 3 of stat(5), starttime field 22
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_exists(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if Path("/proc/self/stat").exists():  # Linux: a zombie has exited
        return start_time(pid) is not None
    return True


@dataclass(frozen=True)
class Proc:
    """A process, tied to its start time where the OS tells it (Linux)."""

    pid: int
    started: str | None

    @classmethod
    def of(cls, pid: int) -> Proc:
        return cls(pid, start_time(pid))

    @property
    def verifiable(self) -> bool:
        """True when a reused pid cannot be taken for this process."""
        return self.started is not None

    def alive(self) -> bool:
        if not process_exists(self.pid):
            return False
        return self.started is None or start_time(self.pid) == self.started


@dataclass
class UpRecord:
    """What the runtime file says about one ``mcp-lab up``."""

    up: Proc
    redis_url: str
    mcp_url: str
    children: dict[str, Proc] = field(default_factory=dict)
    sse_url: str | None = None  # None: legacy SSE turned off
    # The embedded Redis's data directory (None with REDIS_URL), and whether it is
    # a temporary one (--ephemeral).
    data_dir: str | None = None
    ephemeral: bool = False

    @property
    def port(self) -> int | None:
        """Its server's port."""
        return urlsplit(self.mcp_url).port

    @property
    def base_url(self) -> str:
        """http://host:port of the server (the dashboard and /healthz are there)."""
        parts = urlsplit(self.mcp_url)
        return f"{parts.scheme}://{parts.netloc}"

    def to_json(self) -> str:
        procs = {"up": self.up, **self.children}
        return json.dumps(
            {
                "redis_url": self.redis_url,
                "mcp_url": self.mcp_url,
                "sse_url": self.sse_url,
                "data_dir": self.data_dir,
                "ephemeral": self.ephemeral,
                "processes": {name: [p.pid, p.started] for name, p in procs.items()},
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> UpRecord:
        data = json.loads(text)
        procs = {name: Proc(int(pid), start) for name, (pid, start) in data["processes"].items()}
        up = procs.pop("up")
        sse, data_dir = data.get("sse_url"), data.get("data_dir")
        return cls(
            up,
            str(data["redis_url"]),
            str(data["mcp_url"]),
            procs,
            sse_url=None if sse is None else str(sse),
            data_dir=None if data_dir is None else str(data_dir),
            ephemeral=bool(data.get("ephemeral", False)),
        )


def read_record(path: Path | None = None) -> UpRecord | None:
    """The record in ``path`` (default ``up.json``), None when there is none (or it is
    not readable)."""
    try:
        return UpRecord.from_json((path or runtime_file()).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_record(record: UpRecord, path: Path | None = None) -> None:
    path = path or runtime_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(record.to_json())
    temporary.chmod(0o600)
    os.replace(temporary, path)


def remove_record(pid: int, path: Path | None = None) -> None:
    """Remove the runtime file ``path`` (default ``up.json``) if it is the record of
    ``up`` process ``pid``."""
    path = path or runtime_file()
    record = read_record(path)
    if record is None or record.up.pid == pid:
        path.unlink(missing_ok=True)


def records() -> list[tuple[Path, UpRecord]]:
    """Every runtime file there is, with its record (live or not): ``up.json`` first."""
    paths = [runtime_file(), *sorted(state_dir().glob(_BESIDE_FILES))]
    return [(path, record) for path in paths if (record := read_record(path)) is not None]


def _age(record: UpRecord) -> tuple[bool, int, int]:
    """Sort key: the up on the default port first, then the oldest (start time)."""
    started = record.up.started
    since_boot = int(started) if started is not None and started.isdigit() else 2**62
    return (record.port != DEFAULT_PORT, since_boot, record.up.pid)


def running_ups() -> list[UpRecord]:
    """The records of every live ``mcp-lab up``: the one commands speak of when
    nothing names another first (the one on the default port, else the oldest)."""
    return sorted((r for _, r in records() if r.up.alive()), key=_age)


def running_up(settings: LabSettings | None = None) -> UpRecord | None:
    """The record of a live ``mcp-lab up``, if one runs: the one on the port
    ``settings`` name (MCP_TEST_PORT) if one runs there, else the first of
    :func:`running_ups`."""
    ups = running_ups()
    if settings is not None and "port" in settings.model_fields_set:
        ups = sorted(ups, key=lambda r: r.port != settings.port)
    return ups[0] if ups else None


def find_redis(settings: LabSettings) -> tuple[str, str]:
    """The Redis a command should use, and where that choice came from.

    In order: ``REDIS_URL`` (environment or ``.env``), a running ``mcp-lab up`` (the
    one on the port ``MCP_TEST_PORT`` names, if one runs there), then the default
    ``redis://127.0.0.1:6379/0``.
    """
    if "redis_url" in settings.model_fields_set:
        named = "REDIS_URL" in os.environ or "MCP_TEST_REDIS_URL" in os.environ
        return settings.redis_url, "REDIS_URL" if named else "REDIS_URL in .env"
    record = running_up(settings)
    if record is not None:
        return record.redis_url, f"the running mcp-lab up, pid {record.up.pid}"
    return settings.redis_url, "the default: no REDIS_URL and no running mcp-lab up"


SERVER_FIELDS = ("host", "port", "path", "sse_path")


def find_server(settings: LabSettings) -> tuple[LabSettings, str]:
    """``settings`` with the server to talk to, and where that choice came from.

    In order: the server settings named in the environment or ``.env``
    (``MCP_TEST_HOST``, ``MCP_TEST_PORT``, ...), a running ``mcp-lab up`` (its URLs),
    then the defaults (``http://127.0.0.1:8089``).
    """
    named = [f for f in SERVER_FIELDS if f in settings.model_fields_set]
    if named:
        names = ", ".join(f"MCP_TEST_{f.upper()}" for f in named)
        return settings, names if any(
            f"MCP_TEST_{f.upper()}" in os.environ for f in named
        ) else f"{names} in .env"
    record = running_up()
    if record is None:
        return settings, "the default: no MCP_TEST_PORT and no running mcp-lab up"
    update = up_urls(settings, record)
    return settings.model_copy(update=update), f"the running mcp-lab up, pid {record.up.pid}"


def up_urls(settings: LabSettings, record: UpRecord) -> dict[str, Any]:
    """The server settings (host, port, path, sse_path) of the running ``up`` in
    ``record``, for ``settings.model_copy(update=...)``."""
    parts = urlsplit(record.mcp_url)
    return {
        "host": parts.hostname or settings.host,
        "port": parts.port or settings.port,
        "path": parts.path or settings.path,
        "sse_path": urlsplit(record.sse_url).path if record.sse_url else "",
    }


@contextlib.contextmanager
def start_lock(timeout: float) -> Iterator[Callable[[], None]]:
    """Held by an ``up`` from its look at the runtime files until it has written its own
    (call the function it yields, at the latest on leaving): two ups started at once do
    not take one file or one data directory. TimeoutError when another holds it
    longer than ``timeout`` seconds."""
    import fcntl  # POSIX, as the rest of up

    path = state_dir() / _LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    held = [fd]

    def release() -> None:
        while held:
            os.close(held.pop())  # closing it releases the lock

    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path} stayed locked for {timeout:g} s") from None
                time.sleep(_POLL_SECONDS)
        yield release
    finally:
        release()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):  # it ended meanwhile
        os.kill(pid, sig)


def stop_leftovers(procs: dict[str, Proc]) -> dict[str, Proc]:
    """SIGTERM (then SIGKILL) the live, verifiable ones of ``procs``.

    Returns those still alive or that could not be verified (and were left alone).
    """
    targets = {name: p for name, p in procs.items() if p.verifiable and p.alive()}
    for proc in targets.values():
        _signal(proc.pid, signal.SIGTERM)
    for sig in (signal.SIGKILL, None):
        deadline = time.monotonic() + _STOP_SECONDS
        while time.monotonic() < deadline and any(p.alive() for p in targets.values()):
            time.sleep(_POLL_SECONDS)
        if sig is None:
            break
        for proc in targets.values():
            if proc.alive():
                _signal(proc.pid, sig)
    return {name: p for name, p in procs.items() if p.alive()}
