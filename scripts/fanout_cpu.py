"""Server CPU per notification of a fan-out, and where it goes (optional py-spy).

``scripts/bench --only fanout`` times one publish; this sets up the same N
subscribed sessions (shared scope, the benchmark's raw client; subscribed
``--concurrency`` at a time, not all at once as the benchmark does) once, waits for
the subscribes' own writes to settle, then publishes ``--rounds`` times and
prints, per publish, p50/p99/max from publish to notification and the server
process's CPU time over it (until every notification arrived, plus 1 s for the
records and log lines). ``--spy FILE`` records the server with py-spy (raw
format) over the second publish.

    .venv/bin/python scripts/fanout_cpu.py [--code DIR] [-n 1000] [--spy out.txt]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.fanout import UPDATES_CHANNEL
from bench.procs import ROOT, free_port, start_lab
from bench.sessions import setup_sessions, subscribe_all
from bench.table import pct
from rawmcp import STATUS_URI, RawClient

SETTLE_SECONDS = 2.0
AFTER_SECONDS = 1.0
SPY_SECONDS = 4


def cpu_seconds(stat: int) -> float:
    """User + system CPU time of the process whose ``/proc/PID/stat`` is open as ``stat``
    (read again each time, through the same descriptor)."""
    fields = os.pread(stat, 4096, 0).decode().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def publishes(
    port: int, n: int, url: str, pid: int, rounds: int, spy: str, concurrency: int
) -> None:
    from redis.asyncio import Redis

    # Opened before the sessions, which may take every file descriptor left.
    redis = Redis.from_url(url)
    await redis.ping()
    stat = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    clients, failed, _ = await setup_sessions(port, n, concurrency, name="fanout")
    # Subscribed ``concurrency`` at a time: this measures the fan-out, not a storm.
    subscribed: list[RawClient] = []
    refused: Counter[str] = Counter()
    for first in range(0, len(clients), concurrency):
        some, no = await subscribe_all(clients[first : first + concurrency])
        subscribed += some
        refused += no
    print(f"sessions: {len(subscribed)} subscribed, {sum(failed.values())} failed setup, "
          f"{sum(refused.values())} refused")  # fmt: skip
    await asyncio.sleep(SETTLE_SECONDS)  # the subscribes' evidence and log writes
    spying: subprocess.Popen[bytes] | None = None
    try:
        for round_ in range(rounds):
            if spy and round_ == 1:
                py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
                command = [py_spy or "py-spy", "record", "-p", str(pid), "-f", "raw", "-o", spy]
                command += ["-d", str(SPY_SECONDS), "-r", "250", "--nonblocking"]
                spying = subprocess.Popen(command, stdout=subprocess.DEVNULL)
                await asyncio.sleep(0.7)  # py-spy attached
            for client in subscribed:
                client.notifications.clear()
            version = 1_000_000 + int(time.time()) + round_
            key = f"mcp:state:shared:{STATUS_URI}"
            await redis.hset(key, mapping={"version": version, "text": "x"})
            body = json.dumps({"uri": STATUS_URI, "version": version})
            cpu = cpu_seconds(stat)
            published = asyncio.get_running_loop().time()
            await redis.publish(UPDATES_CHANNEL, body)
            await asyncio.gather(*(c.wait_notification(1, 120.0) for c in subscribed))
            got = [c.notifications[0][0] - published for c in subscribed if c.notifications]
            await asyncio.sleep(AFTER_SECONDS)
            cpu_ms = (cpu_seconds(stat) - cpu) * 1000
            print(
                f"publish {round_}: {len(got)} notified, p50/p99/max "
                f"{pct(got, 0.5):.1f} / {pct(got, 0.99):.1f} / "
                f"{pct(got, 1.0):.1f} ms; server CPU {cpu_ms:.0f} ms "
                f"({cpu_ms * 1000 / max(len(got), 1):.0f} us per notification)",
                flush=True,
            )
    finally:
        if spying is not None:
            spying.wait(timeout=SPY_SECONDS + 30)
        await redis.aclose()
        os.close(stat)
        await asyncio.gather(*(c.end() for c in clients))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout of the lab")
    parser.add_argument("-n", type=int, default=1000, help="subscribed sessions")
    parser.add_argument("--rounds", type=int, default=3, help="publishes")
    parser.add_argument("--concurrency", type=int, default=200, help="sessions set up at a time")
    parser.add_argument("--spy", default="", help="py-spy raw output of the second publish")
    args = parser.parse_args()
    from mcp_lab.process.embedded_redis import start_redis

    print(f"lab code: {args.code.resolve()}  load: {os.getloadavg()[0]:.1f}")
    redis_server = start_redis()
    try:
        port = free_port()
        procs = start_lab(
            args.code.resolve(),
            redis_server.url,
            port,
            False,
            state_scope="shared",
            update_delay_seconds="3600",
        )
        try:
            asyncio.run(
                publishes(
                    port,
                    args.n,
                    redis_server.url,
                    procs[0].process.pid,
                    args.rounds,
                    args.spy,
                    args.concurrency,
                )
            )
        finally:
            for proc in procs:
                proc.stop()
    finally:
        redis_server.stop()


if __name__ == "__main__":
    main()
