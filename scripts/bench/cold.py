"""Cold start: seconds from spawning the lab, the floor, the peer to a first initialize."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from rawmcp import RawClient

from bench.peer import Peer
from bench.procs import HIDDEN, HOST, ROOT, Proc, _hiding_path, free_port
from bench.sessions import _CLIENT_ERRORS


async def first_initialize(port: int, timeout: float = 60.0) -> float:
    """Seconds until an initialize on ``port`` succeeds (polled every 20 ms, bounded)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        client = RawClient(HOST, port, name="cold")
        try:
            await client.initialize()
            await client.end()
            return time.perf_counter() - started
        except _CLIENT_ERRORS:
            await client.close()
            await asyncio.sleep(0.02)  # nothing to await: the port is not open yet
    raise TimeoutError(f"no initialize on port {port} within {timeout}s")


def cold_start(code: Path, peer: Peer | None = None) -> tuple[float, float, float | None]:
    """Seconds from spawning ``mcp-lab up`` / the floor / the peer to their first
    initialize (no peer: None)."""
    port, redis_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
    env.pop("REDIS_URL", None)
    env.update(MCP_TEST_PORT=str(port), PYTHONUNBUFFERED="1")
    if HIDDEN:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_hiding_path(), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    lab = Proc(
        "up", [sys.executable, "-m", "mcp_lab", "up", "--redis-port", str(redis_port)], code, env
    )
    try:
        asyncio.run(first_initialize(port))
        lab_seconds = time.perf_counter() - started
    finally:
        lab.stop()
    peer_seconds = None
    if peer is not None:
        peer_port = free_port()
        started = time.perf_counter()
        peer_proc = peer.spawn(peer_port, delay=3600)
        try:
            asyncio.run(first_initialize(peer_port))
            peer_seconds = time.perf_counter() - started
        finally:
            peer_proc.stop()
    floor_port = free_port()
    started = time.perf_counter()
    floor = Proc(
        "floor",
        [sys.executable, str(ROOT / "scripts" / "floor.py"), "--port", str(floor_port)],
        ROOT,
        dict(os.environ),
    )
    try:
        asyncio.run(first_initialize(floor_port))
        floor_seconds = time.perf_counter() - started
    finally:
        floor.stop()
    return lab_seconds, floor_seconds, peer_seconds
