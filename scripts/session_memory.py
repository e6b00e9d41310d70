"""Where an idle subscribed session's memory goes: server heap by component, Redis by key.

Starts a redis-server and the lab's server (in a wrapper that can start
tracemalloc and dump a snapshot on SIGUSR1), sets up ``--warmup`` subscribed
sessions, starts tracing, sets up ``--sessions`` more (GET stream open,
subscribed ``--concurrency`` at a time), and prints what is still allocated per
session, by the innermost frame outside asyncio/anyio/stdlib/pydantic, and the
Redis ``MEMORY USAGE`` per key kind. Bounded: sizes from the flags, every wait
has a timeout. Results: docs/performance.md, "Memory and start-up".

    .venv/bin/python scripts/session_memory.py [--sessions 500] [--warmup 50] [--concurrency 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench.procs import Proc, free_port, lab_env  # noqa: E402
from bench.sessions import setup_sessions, subscribe_all  # noqa: E402
from rawmcp import RawClient  # noqa: E402

SNAPSHOT_ENV = "MCP_LAB_SNAPSHOT"
# Frames that only carry an allocation made for someone else.
_GENERIC = (
    "asyncio/",
    "anyio/",
    "contextlib",
    "typing.py",
    "weakref",
    "_weakrefset",
    "<string>",
    "pydantic",
    "collections",
    "functools",
    "abc.py",
    "enum.py",
    "dataclasses",
    "threading",
    "socket",
    "copy",
    "json/",
    "inspect",
    "logging/",
)


def serve() -> None:
    """The lab's server, with SIGUSR1 starting tracemalloc (first) or dumping a snapshot."""
    import gc
    import tracemalloc

    def on_signal(signum: int, frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(12)
            return
        gc.collect()
        path = os.environ[SNAPSHOT_ENV]
        tracemalloc.take_snapshot().dump(path + ".part")
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR1, on_signal)
    from mcp_lab.cli.main import main

    main(["server"])


def _where(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1]
    if "/services/mcp_lab/" in filename:
        return "services/mcp_lab/" + filename.split("/services/mcp_lab/", 1)[1]
    return re.sub(r".*/lib/python3\.\d+/", "", filename)


def _owner(frames: list[tuple[str, int]]) -> str:
    """The file of the innermost frame (of ``frames``, innermost first) that is not
    generic; "(event loop)" when only the loop's own callbacks come before it."""
    for filename, _ in frames:
        where = _where(filename)
        if where.endswith("asyncio/events.py"):  # Handle._run: called by the loop itself
            return "(event loop)"
        if not where.startswith(_GENERIC):
            return where
    return "(generic only)"


def by_component(snapshot_path: Path, sessions: int) -> list[tuple[str, float]]:
    """KB per session still allocated, by the file of the innermost non-generic frame."""
    import tracemalloc

    snapshot = tracemalloc.Snapshot.load(str(snapshot_path))
    sizes: Counter[str] = Counter()
    for trace in snapshot.traces:
        frames = [(f.filename, f.lineno) for f in reversed(list(trace.traceback))]
        sizes[_owner(frames)] += trace.size
    return [(name, size / 1024 / sessions) for name, size in sizes.most_common()]


async def subscribed_sessions(port: int, n: int, concurrency: int) -> list[RawClient]:
    clients, failed, _ = await setup_sessions(port, n, 100, name="memory")
    subscribed: list[RawClient] = []
    for i in range(0, len(clients), concurrency):
        accepted, refused = await subscribe_all(clients[i : i + concurrency])
        subscribed += accepted
        if refused:
            print(f"  refused: {dict(refused)}")
    if failed:
        print(f"  setup failed: {dict(failed)}")
    return subscribed


async def measure(port: int, pid: int, args: argparse.Namespace, snapshot: Path) -> None:
    import redis.asyncio as aredis

    rc = aredis.Redis.from_url(args.redis_url)
    held = await subscribed_sessions(port, args.warmup, args.concurrency)
    os.kill(pid, signal.SIGUSR1)  # start tracing
    mem0 = (await rc.info("memory"))["used_memory"]
    sessions = await subscribed_sessions(port, args.sessions, args.concurrency)
    held += sessions
    await asyncio.sleep(2)  # nothing to await: let the burst's writes and buffers settle
    n = max(len(sessions), 1)
    redis_kb = ((await rc.info("memory"))["used_memory"] - mem0) / 1024 / n
    os.kill(pid, signal.SIGUSR1)  # dump
    deadline = time.monotonic() + 60
    while not snapshot.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # written by a signal handler: nothing to await
    kinds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    async for key in rc.scan_iter(count=1000):
        kind = ":".join(key.decode().split(":")[:2])
        kinds[kind] += await rc.memory_usage(key, samples=0) or 0
        counts[kind] += 1
    await rc.aclose()
    await asyncio.gather(*(c.end() for c in held))
    # No RSS here: tracemalloc's own traces take as much again (see scripts/bench).
    print(f"{len(sessions)} sessions; Redis used_memory {redis_kb:.2f} KB/session")
    print("\n| server heap, by component | KB per session |\n|---|---|")
    rows = by_component(snapshot, n)
    for name, kb in rows:
        if kb >= 0.2:
            print(f"| {name} | {kb:.2f} |")
    print(f"| (total) | {sum(kb for _, kb in rows):.1f} |")
    print("\n| Redis key kind | keys | bytes each |\n|---|---|---|")
    for kind, size in kinds.most_common():
        print(f"| {kind} | {counts[kind]} | {size / counts[kind]:.0f} |")


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=10, help="subscribes at a time")
    args = parser.parse_args()
    from mcp_lab.process.embedded_redis import start_redis

    redis_server = start_redis()
    args.redis_url = redis_server.url
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mcp-lab-memory-") as folder:
        snapshot = Path(folder) / "snapshot"
        env = lab_env(redis_server.url, port=str(port), update_delay_seconds="3600")
        env.update({SNAPSHOT_ENV: str(snapshot), "MCP_TEST_LOG_LEVEL": "INFO"})
        server = Proc("server", [sys.executable, __file__, "--serve"], ROOT, env)
        try:
            server.wait_for(r"\[lab\] server ready")
            asyncio.run(measure(port, server.process.pid, args, snapshot))
        finally:
            server.stop()
            redis_server.stop()


if __name__ == "__main__":
    main()
