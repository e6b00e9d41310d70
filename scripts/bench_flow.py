#!/usr/bin/env python3
"""Benchmark: latency of the lab's subscription pipeline, with real processes.

Starts a local redis-server, one server and one updater (update delay 0), then
runs the full client flow N times in a row and C sessions at once, and prints
percentiles of: initialize, resources/read, and subscribe -> notification
(XADD, updater, Redis script, publish, relay, GET stream). Also the server's
resident memory before and after.

    .venv/bin/python scripts/bench_flow.py [--flows 50] [--concurrent 20] [--no-resume]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_lab.process.embedded_redis import free_port, start_redis
from tests.support.lab import STATUS_URI, connect, start_server, start_updater


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def show(name: str, samples: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[max(0, int(len(ms) * 0.95) - 1)]
    print(
        f"{name:<28} n={len(ms):<4} p50={statistics.median(ms):7.2f} ms  "
        f"p95={p95:7.2f} ms  max={ms[-1]:7.2f} ms"
    )


async def one_flow(url: str, timings: dict[str, list[float]]) -> None:
    started = time.perf_counter()
    async with connect(url, "bench") as client:
        timings["initialize (incl. connect)"].append(time.perf_counter() - started)
        t = time.perf_counter()
        await client.read_text()
        timings["resources/read"].append(time.perf_counter() - t)
        t = time.perf_counter()
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=30)
        timings["subscribe -> notification"].append(time.perf_counter() - t)


async def run(url: str, flows: int, concurrent: int) -> None:
    await one_flow(
        url,
        {
            k: []
            for k in ("initialize (incl. connect)", "resources/read", "subscribe -> notification")
        },
    )  # warm-up
    for label, rounds, width in (("sequential", flows, 1), ("concurrent", 1, concurrent)):
        timings: dict[str, list[float]] = {
            "initialize (incl. connect)": [],
            "resources/read": [],
            "subscribe -> notification": [],
        }
        started = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(*(one_flow(url, timings) for _ in range(width)))
        elapsed = time.perf_counter() - started
        print(f"\n{label}: {rounds * width} flows in {elapsed:.2f} s")
        for name, samples in timings.items():
            show(name, samples)


def main() -> None:
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument(
        "--no-resume", action="store_true", help="MCP_TEST_RESUMABLE=false (no event store)"
    )
    args = parser.parse_args()
    redis = start_redis()
    server = updater = None
    try:
        resumable = "false" if args.no_resume else "true"
        server = start_server(redis.url, free_port(), update_delay_seconds="0", resumable=resumable)
        updater = start_updater(redis.url, update_delay_seconds="0")
        url = next(line.split("url=")[1].split()[0] for line in server.lines if "url=" in line)
        before = rss_mb(server.process.pid)
        asyncio.run(run(url, args.flows, args.concurrent))
        print(f"\nserver RSS: {before:.1f} MB at start, {rss_mb(server.process.pid):.1f} MB after")
    finally:
        for proc in (server, updater):
            if proc is not None:
                proc.stop()
        redis.stop()


if __name__ == "__main__":
    main()
