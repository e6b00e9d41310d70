"""``mcp-lab up``: Redis, server and updater as separate processes, with prefixed logs.

The embedded Redis keeps its data in a data directory (evidence survives a
restart) unless ``--ephemeral``. While ``up`` runs, the runtime file
(:mod:`mcp_lab.cli.runtime`) says where its Redis is, so other ``mcp-lab``
commands find it; its children end with it (:mod:`mcp_lab.process.lifeline`), and
whatever a killed ``up`` left running is stopped by the next one in its way. A second
``up`` on another port runs beside the first, a lab of its own
(:mod:`mcp_lab.cli.beside`); one on the same port is refused.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.cli import runtime
from mcp_lab.cli.beside import CannotStart, Place, place, say
from mcp_lab.process.embedded_redis import (
    EmbeddedRedis,
    RedisLimits,
    RedisNotFound,
    free_port,
    launch_redis,
)
from mcp_lab.process.lifeline import PARENT_PID_ENV, die_with_parent
from mcp_lab.settings import LabSettings

DEFAULT_EMBEDDED_REDIS_PORT = 6390
_STOP_TIMEOUT_SECONDS = 5
# How long an up waits for another one starting at the same moment to write its record.
_START_LOCK_SECONDS = 15.0
_PING_TIMEOUT_SECONDS = 3
# How long the embedded Redis may take to answer (loading a large data directory).
_REDIS_START_SECONDS = 10
# The updater starts once the server logs this or its port takes a connection (its
# ready line is INFO: a quieter log level never shows it), so that its imports do not
# take CPU from the server's on the way to the first initialize; at the latest this
# long after the server (a loaded machine). Jobs queued meanwhile wait in Redis for it.
SERVER_READY = "[lab] server ready"
_UPDATER_AT_LATEST_SECONDS = 60.0
_LISTEN_POLL_SECONDS = 0.1
# The exit code of ``mcp-lab server`` when it cannot listen on its port.
SERVER_CANNOT_LISTEN = 3


@dataclass(frozen=True)
class UpOptions:
    """The options of ``mcp-lab up``."""

    port: int | None = None
    redis_port: int | None = None
    data_dir: Path | None = None
    ephemeral: bool = False
    scenario: str | None = None  # MCP_TEST_SCENARIO for server and updater


def _pump(
    name: str, stream: IO[bytes], lock: threading.Lock, seen: tuple[str, threading.Event] | None
) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        with lock:
            print(f"{name:<7} | {line}", flush=True)
        if seen is not None and seen[0] in line:
            seen[1].set()


def _spawn(
    command: str,
    env: dict[str, str],
    lock: threading.Lock,
    seen: tuple[str, threading.Event] | None = None,
) -> subprocess.Popen[bytes]:
    """``mcp-lab command`` as a child, its output prefixed; ``seen``: an event set
    when a line containing the text appears."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_lab", command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent(),
        # a group of its own: a Ctrl-C in the terminal reaches only up, which passes on
        # one SIGTERM (two signals would cut the server's graceful shutdown short)
        process_group=0 if os.name == "posix" else None,
    )
    assert process.stdout is not None
    pump = threading.Thread(target=_pump, args=(command, process.stdout, lock, seen), daemon=True)
    pump.start()
    return process


def _port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on ``host``:``port`` (as redis-server and uvicorn
    do, with SO_REUSEADDR: connections of a stopped one in TIME_WAIT do not count)."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError:
        return True  # a name that does not resolve: the server says so itself
    with socket.socket(family, kind) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError:
            return False
    return True


def _check_server_port(settings: LabSettings) -> None:
    """Refuse to start (before anything runs) when the server's port is taken."""
    if not _port_is_free(settings.port, settings.host):
        raise CannotStart(
            f"{settings.host}:{settings.port} is in use by another process: start with "
            f"--port N (or MCP_TEST_PORT=N), or stop what listens there"
        )


def _check_redis_answers(settings: LabSettings) -> None:
    """Fail at once, saying what to do, when REDIS_URL names a Redis that does not answer."""
    import redis  # here: the embedded Redis, the usual case, needs no client in up

    url = settings.redis_url
    try:
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=_PING_TIMEOUT_SECONDS,
            socket_timeout=_PING_TIMEOUT_SECONDS,
        )
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        _, source = runtime.find_redis(settings)
        raise CannotStart(
            f"{source} is {url}, and that Redis does not answer ({exc}). mcp-lab up uses the "
            "Redis REDIS_URL names instead of starting its own: start that Redis, or unset "
            "REDIS_URL (and remove it from .env) to let mcp-lab up run its own."
        ) from None


def _embedded_port(options: UpOptions, beside: list[runtime.UpRecord], lock: threading.Lock) -> int:
    """The embedded Redis's port: --redis-port, else 6390, else a free one. A port the
    Redis of a lab ``beside`` has is taken, listening yet or not (it may be starting)."""

    def whose(port: int) -> str:
        lab = next((r for r in beside if r.redis_url == f"redis://127.0.0.1:{port}/0"), None)
        if lab is None:
            return "by another process"
        return f"by the Redis of the mcp-lab up on port {lab.port} (pid {lab.up.pid})"

    def free(port: int) -> bool:
        return whose(port) == "by another process" and _port_is_free(port)

    if options.redis_port is not None:
        if not free(options.redis_port):
            raise CannotStart(
                f"--redis-port {options.redis_port}: 127.0.0.1:{options.redis_port} is in use "
                f"{whose(options.redis_port)}; choose another port"
            )
        return options.redis_port
    if free(DEFAULT_EMBEDDED_REDIS_PORT):
        return DEFAULT_EMBEDDED_REDIS_PORT
    port = free_port()
    say(
        lock,
        f"127.0.0.1:{DEFAULT_EMBEDDED_REDIS_PORT} is in use {whose(DEFAULT_EMBEDDED_REDIS_PORT)}; "
        f"the embedded Redis takes {port}",
    )
    return port


@contextmanager
def _redis_for_lab(
    settings: LabSettings, options: UpOptions, at: Place, lock: threading.Lock
) -> Iterator[tuple[str, EmbeddedRedis | None]]:
    if "redis_url" in settings.model_fields_set:  # REDIS_URL from the environment or .env
        _check_redis_answers(settings)
        yield settings.redis_url, None
        return
    port = _embedded_port(options, at.beside, lock)
    data_dir = at.data_dir
    try:
        # Not waited for here: _run starts the server (a second of imports) while
        # it comes up, then waits for it (_wait_for_redis).
        embedded = launch_redis(
            port, data_dir=data_dir, with_parent=True, limits=RedisLimits.of(settings)
        )
    except (RedisNotFound, OSError) as exc:
        raise CannotStart(f"the embedded Redis did not start: {exc}") from None
    try:
        yield embedded.url, embedded
    finally:
        embedded.stop()


def _put_on_path() -> list[str]:
    """The banner's first command when the ``mcp-lab`` on PATH is not this one (its
    venv is not active in the user's shell): the line that makes it so."""
    bin_dir = Path(sys.executable).parent
    here = bin_dir / "mcp-lab"
    found = shutil.which("mcp-lab")
    if not here.exists() or (found is not None and Path(found).resolve() == here.resolve()):
        return []
    activate = bin_dir / "activate"
    if not activate.exists():
        return [f'    export PATH="{bin_dir}:$PATH"   # once per shell: puts mcp-lab on PATH']
    try:
        shown = activate.relative_to(Path.cwd())
    except ValueError:
        shown = activate
    return [f"    source {shown}   # once per shell: puts mcp-lab on PATH"]


def _another_shell(settings: LabSettings, beside: list[runtime.UpRecord] | None) -> list[str]:
    """The banner's head of the commands: how this lab is found from another shell."""
    if not beside:
        return ["  In another shell (mcp-lab finds this lab by itself):", *_put_on_path()]
    return [
        f"  In another shell (mcp-lab speaks of the lab on port {beside[0].port} unless "
        "MCP_TEST_PORT names this one):",
        *_put_on_path(),
        f"    export MCP_TEST_PORT={settings.port}   # once per shell: mcp-lab speaks of this lab",
    ]


def banner(
    settings: LabSettings,
    redis_url: str,
    embedded: EmbeddedRedis | None,
    beside: list[runtime.UpRecord] | None = None,
) -> str:
    """What ``up`` prints once the lab runs: where everything is, and what to type
    (``beside``: the labs running beside it, the one commands speak of first, when
    that is not this one)."""
    if embedded is None:
        where = f"{redis_url} (REDIS_URL)"
    elif embedded.workdir is None:
        where = f"embedded redis-server on 127.0.0.1:{embedded.port}, data in {embedded.data_dir}"
    else:
        where = f"embedded redis-server on 127.0.0.1:{embedded.port}, throwaway data (--ephemeral)"
    uri = REVIEW_STATUS.uri
    return "\n".join(
        [
            "",
            f"  MCP server   {settings.mcp_url}   (Streamable HTTP: 2025-11-25 and 2026-07-28)",
            *([f"               {settings.sse_url}   (legacy SSE)"] if settings.sse_path else []),
            f"  Dashboard    {settings.base_url}/",
            f"  Redis        {where}",
            f"  State scope  {settings.state_scope}; update {settings.update_delay_seconds}s "
            "after each subscribe",
            f"  Scenario     {settings.scenario} (mcp-lab scenarios lists them)",
            "",
            *_another_shell(settings, beside),
            "    mcp-lab status      # what runs where, and the sessions and clients now",
            "    mcp-lab trigger     # full update (bump + notify) of every subscribed session",
            "    mcp-lab report      # how far each client got",
            "    mcp-lab reset       # every state back to version 1, a new observation run",
            "    mcp-lab connect claude-code   # its config for this lab (also codex, cursor...)",
            f"    mcp-lab redis-cli publish {settings.updates_channel} {uri}",
            "                        # notify every subscribed session, no version change",
            "",
            "  Ctrl-C stops everything.",
            "",
        ]
    )


def run_lab(settings: LabSettings, options: UpOptions | None = None) -> int:
    """Run the whole lab until Ctrl-C (or SIGTERM, SIGHUP) or until a process dies."""
    options = options or UpOptions()
    if options.port is not None:
        settings = settings.model_copy(update={"port": options.port})
    if options.scenario is not None:
        settings = settings.model_copy(update={"scenario": options.scenario})
    lock = threading.Lock()
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, on_signal)
    try:
        with runtime.start_lock(_START_LOCK_SECONDS) as claimed:
            # first: a killed up's server may hold the port
            at = place(settings, options.data_dir, options.ephemeral, lock)
            _check_server_port(settings)
            with _redis_for_lab(settings, options, at, lock) as (redis_url, embedded):
                return _run(settings, redis_url, embedded, lock, stopping, at, claimed)
    except TimeoutError:
        print(
            "mcp-lab up: another mcp-lab up is starting and holds the runtime files; "
            "start again once it runs",
            file=sys.stderr,
            flush=True,
        )
        return 2
    except CannotStart as exc:
        print(f"mcp-lab up: {exc}", file=sys.stderr, flush=True)
        return 2


def _run(
    settings: LabSettings,
    redis_url: str,
    embedded: EmbeddedRedis | None,
    lock: threading.Lock,
    stopping: threading.Event,
    at: Place,
    claimed: Callable[[], None],
) -> int:
    """Run the lab (``at`` its place beside others; ``claimed`` releases the start
    lock, once its runtime file is written)."""
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "MCP_TEST_PORT": str(settings.port),
        "MCP_TEST_SCENARIO": settings.scenario,
        "PYTHONUNBUFFERED": "1",
        PARENT_PID_ENV: str(os.getpid()),
    }
    server_ready = threading.Event()
    processes = {"server": _spawn("server", env, lock, (SERVER_READY, server_ready))}
    me = runtime.Proc.of(os.getpid())

    def record() -> None:
        children = {name: runtime.Proc.of(p.pid) for name, p in processes.items()}
        if embedded is not None:
            children["redis"] = runtime.Proc.of(embedded.process.pid)
        runtime.write_record(
            runtime.UpRecord(
                me,
                redis_url,
                settings.mcp_url,
                children,
                sse_url=settings.sse_url if settings.sse_path else None,
                data_dir=None if embedded is None else embedded.data_dir,
                ephemeral=embedded is not None and embedded.workdir is not None,
            ),
            at.path,
        )

    record()
    claimed()
    try:
        if embedded is not None and not _wait_for_redis(embedded, processes, stopping):
            return _supervise(processes, lock, stopping)  # stopped while Redis started
        # The banner once the server listens (or is late): never after it failed.
        if _server_ready_or_late(server_ready, processes["server"], stopping, settings):
            with lock:
                shown = None if at.found_by_itself else at.beside
                print(banner(settings, redis_url, embedded, shown), flush=True)
            processes["updater"] = _spawn("updater", env, lock)
            record()
        return _supervise(processes, lock, stopping)
    except BaseException:
        _stop(processes)  # whatever went wrong, the children do not outlive up
        raise
    finally:
        runtime.remove_record(me.pid, at.path)


def _server_ready_or_late(
    ready: threading.Event,
    server: subprocess.Popen[bytes],
    stopping: threading.Event,
    settings: LabSettings,
) -> bool:
    """Wait (at most _UPDATER_AT_LATEST_SECONDS) for the server's ready line or its port
    taking a connection; False when the server died or up is being stopped meanwhile
    (no updater is started)."""
    deadline = time.monotonic() + _UPDATER_AT_LATEST_SECONDS
    address = (_local(settings.host), settings.port)
    while not ready.wait(_LISTEN_POLL_SECONDS):
        if stopping.is_set() or server.poll() is not None:
            return False
        if _takes_connections(address) or time.monotonic() >= deadline:
            break
    return True


def _local(host: str) -> str:
    """Where up reaches a server listening on ``host`` (every address: loopback)."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def _takes_connections(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=_LISTEN_POLL_SECONDS):
            return True
    except OSError:
        return False


def _wait_for_redis(
    embedded: EmbeddedRedis,
    processes: dict[str, subprocess.Popen[bytes]],
    stopping: threading.Event,
) -> bool:
    """Wait for the embedded Redis, launched beside the server; False if up is
    stopped meanwhile (Ctrl-C, SIGTERM). If Redis does not answer, stop the server
    (it would retry forever) and say why."""
    try:
        embedded.wait_ready(_REDIS_START_SECONDS, give_up=stopping.is_set)
    except RuntimeError as exc:
        if stopping.is_set():
            return False
        _stop(processes)
        raise CannotStart(f"the embedded Redis did not start: {exc}") from None
    return True


def _supervise(
    processes: dict[str, subprocess.Popen[bytes]], lock: threading.Lock, stopping: threading.Event
) -> int:
    exit_code = 0
    while not stopping.wait(0.2):
        dead = [name for name, p in processes.items() if p.poll() is not None]
        if dead:
            for name in dead:
                code = processes[name].returncode
                say(lock, f"{name} exited with code {code}; stopping the lab")
            # the server could not listen (its port was taken after all): up cannot start
            could_not_listen = processes["server"].returncode == SERVER_CANNOT_LISTEN
            exit_code = 2 if could_not_listen else 1
            break
    say(lock, "stopping server and updater")
    _stop(processes)
    return exit_code


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """One SIGTERM to each process still running, then SIGKILL what does not end in time.
    SIGTERM, not SIGINT: a child still starting (Python importing its site module, before
    any code of ours could catch a KeyboardInterrupt) ends quietly instead of printing a
    traceback; the server shuts down as gracefully on either (uvicorn), and the
    updater's work is safe whenever it stops (its jobs wait in Redis until acknowledged)."""
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes.values():
        try:
            process.wait(timeout=_STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
