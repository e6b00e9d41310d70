"""Reads per second on one session, and the server's CPU per read."""

from __future__ import annotations

import asyncio
import time

from rawmcp import STATUS_URI, RawClient

from bench.procs import HOST, cpu_seconds


async def reads_per_second(
    port: int, pid: int, seconds: float, concurrency: int = 16
) -> tuple[float, float]:
    """resources/read on ONE session from ``concurrency`` connections for ``seconds``:
    reads per second, and the server's CPU milliseconds per read (process ``pid``;
    steadier than the rate on a machine other work shares)."""
    first = RawClient(HOST, port, name="reads")
    await first.initialize()
    workers = [first] + [first.clone() for _ in range(concurrency - 1)]
    done = 0
    failed = 0
    deadline = time.perf_counter() + seconds

    async def loop(client: RawClient) -> None:
        nonlocal done, failed
        while time.perf_counter() < deadline:
            reply = await client.request("resources/read", {"uri": STATUS_URI})
            if "result" in reply:
                done += 1
            else:
                failed += 1

    started, cpu = time.perf_counter(), cpu_seconds(pid)
    await asyncio.gather(*(loop(w) for w in workers))
    elapsed, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu
    for worker in workers[1:]:
        await worker.close()
    await first.end()
    if failed:
        print(f"  reads: {failed} failed")
    return done / elapsed, cpu * 1000 / max(done, 1)
