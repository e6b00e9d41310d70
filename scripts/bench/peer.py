"""The peer lab in scripts/bench (``--peer DIR``): start, wait for, stop.

The peer is the TypeScript lab the lab is compared with: a checkout of
scottlz0310/mcp-resource-subscriber, built where it lies as its own README says
(nothing of it is kept in this repository). Its server
(``dist/src/server/index.js``: Express, the TypeScript SDK's Streamable HTTP
transport, one ``McpServer`` per session, no store) is run as its Dockerfile runs
it (``NODE_ENV=production``, its defaults: log level ``debug``, one console line
per request, to a file here), with two settings of its own from the benchmark:
``MCP_TEST_PORT`` and ``MCP_TEST_UPDATE_DELAY_SECONDS`` (it updates each subscribed
session once, by a timer per session, that many seconds after its subscribe).

It listens on every interface in its code; ``scripts/lib/loopback.mjs``, preloaded
with ``node --import``, makes that loopback. Its GET stream sends no priming event
(no event store), so its sessions count as set up at the stream's 200 head
(``RawClient.open_stream(live_at_head=True)``), the moment its transport has
registered the stream.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = Path(__file__).resolve().parent.parent / "lib" / "loopback.mjs"
ENTRY = "dist/src/server/index.js"


@dataclass
class Peer:
    """Where the peer is and which ``node`` runs it."""

    directory: Path
    node: str = "node"

    def check(self) -> None:
        if not (self.directory / ENTRY).is_file():
            raise SystemExit(
                f"--peer {self.directory}: no {ENTRY} (build it first: see docs/performance.md)"
            )

    def version(self) -> str:
        done = subprocess.run([self.node, "--version"], capture_output=True, text=True, timeout=30)
        return done.stdout.strip() or done.stderr.strip()

    def spawn(self, port: int, delay: float) -> PeerProcess:
        """The peer's server on ``port``, not waited for."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
        env.update(
            NODE_ENV="production",
            MCP_TEST_PORT=str(port),
            MCP_TEST_UPDATE_DELAY_SECONDS=f"{delay:g}",
        )
        command = [self.node, "--import", LOOPBACK.as_uri(), ENTRY]
        return PeerProcess(port, command, self.directory, env)

    def start(self, port: int, delay: float, timeout: float = 30.0) -> PeerProcess:
        """The peer's server on ``port``, accepting connections."""
        peer = self.spawn(port, delay)
        try:
            peer.wait_ready(timeout)
        except BaseException:
            peer.stop()
            raise
        return peer


class PeerProcess:
    """One running peer server; its console output goes to a temporary file (one line
    per request at its default log level: a pipe read by the benchmark would take the
    client's CPU)."""

    def __init__(self, port: int, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.port = port
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, lines: int = 20) -> str:
        self.log.seek(0)
        return "\n".join(self.log.read().decode("utf-8", "replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float) -> None:
        """Until the port accepts a connection (polled every 20 ms, bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"peer: not listening on {self.port} within {timeout}s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGINT (the peer closes every connection and exits), then a kill if need be."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.close()
