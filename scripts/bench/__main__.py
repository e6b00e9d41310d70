#!/usr/bin/env python3
"""Benchmark: the lab under load, next to a bare floor server, in one run.

Starts a local redis-server, the lab (server + updater, real processes) and the
floor (scripts/floor.py: the same protocol subset with no state store), drives
both with the raw client of scripts/rawmcp.py, and prints one table:

- storm N: N sessions set up (initialize + GET stream), then all subscribe at
  once: refused subscribes, missing notifications, evidence records missing
  from ``mcp:events`` (per session: the initialize, the subscribe, the
  notification; awaited until the lab's writer is idle, and those still missing
  looked for again after the sessions ended: "came late" or missing, beside the
  lab's own count of records it could not write), subscribers left in Redis
  after every session ended, setup sessions/s;
- fan-out N: N sessions subscribed in shared scope, one publish: p50/p99/max from
  the publish to each notification;
- reads/s on one session at concurrency 16;
- KB per session: server RSS and Redis ``used_memory`` growth over N idle
  subscribed sessions with their GET streams open;
- cold start: ``mcp-lab up`` (its own embedded Redis) to the first initialize.

    .venv/bin/python scripts/bench [--storm 1000] [--fanout 500] [--sessions 500]
        [--reads-seconds 5] [--code DIR] [--only storm,late,fanout,reads,memory,cold]
        [--peer DIR [--peer-node NODE]]
    .venv/bin/python scripts/bench --compose-replicas 1,3 [--storm 1000] [--fanout 1000]

``--code DIR`` runs the lab from another checkout (e.g. ``git archive`` of an older
commit) with this venv, to compare before and after on the same machine. Every
phase is bounded: sizes come from the flags, every wait has a timeout.

``--peer DIR`` measures the peer TypeScript lab too (a built checkout
of it; scripts/bench/peer.py), with the same client, in a column between the lab
and the floor: storm, late, reads and cold start (it has no shared update
to fan out). The last column is the lab's figure divided by the peer's.

``--compose-replicas 1,3`` runs the storm and the fan-out instead against the
compose scale profile (N server replicas behind HAProxy, one Redis) for each
count, one column per count (scripts/bench/replicas.py); needs Docker.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench.cold import cold_start  # noqa: E402
from bench.peer import Peer  # noqa: E402
from bench.procs import HIDDEN  # noqa: E402
from bench.rows import _fanout_rows, _reads_memory_rows, _storm_rows  # noqa: E402
from bench.table import Row, _peer_cells, print_table, ratio  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description="The lab under load, next to a bare floor.")
    parser.add_argument("--storm", type=int, default=1000, help="sessions in the storm")
    parser.add_argument("--fanout", type=int, default=500, help="sessions in the fan-out")
    parser.add_argument("--sessions", type=int, default=500, help="idle sessions for KB/session")
    parser.add_argument("--reads-seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=200, help="sessions set up at a time")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound of each wait")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout of the lab to run")
    parser.add_argument("--only", default="storm,late,fanout,reads,memory,cold")
    parser.add_argument(
        "--late", default="1000,5000", help="sizes of the lateness storms (comma-separated)"
    )
    parser.add_argument("--late-delay", type=float, default=2.0, help="update delay, seconds")
    parser.add_argument(
        "--lab-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra MCP_TEST_KEY=VALUE for the lab's processes",
    )
    parser.add_argument(
        "--without",
        default="",
        help="modules the lab must run without, comma-separated (e.g. uvloop,httptools)",
    )
    parser.add_argument(
        "--peer",
        type=Path,
        default=None,
        metavar="DIR",
        help="a built checkout of the peer TypeScript lab, measured beside the lab (a column)",
    )
    parser.add_argument("--peer-node", default="node", help="the node that runs the peer")
    parser.add_argument(
        "--client",
        choices=("raw", "aiohttp"),
        default="raw",
        help="the client of the reads phase (aiohttp: as the comparison with the TypeScript "
        "lab measured; pip install aiohttp)",
    )
    parser.add_argument(
        "--compose-replicas",
        default=None,
        metavar="N,M",
        help="storm and fan-out through the compose scale profile with N, then M, replicas",
    )
    args = parser.parse_args()
    extra = dict(s.split("=", 1) for s in args.lab_setting)
    if args.compose_replicas:
        from bench import replicas

        counts = replicas.parse_counts(args.compose_replicas)
        print(f"compose scale profile, replicas {counts}  cores: {os.cpu_count()}")
        replicas.run(counts, args, extra)
        return
    HIDDEN.extend(filter(None, args.without.split(",")))
    wanted = set(args.only.split(","))
    peer = None
    if args.peer is not None:
        peer = Peer(args.peer.resolve(), args.peer_node)
        peer.check()
    args.peer = peer
    from mcp_lab.process.embedded_redis import start_redis

    code = args.code.resolve()
    hidden = f"  without: {','.join(HIDDEN)}" if HIDDEN else ""
    print(f"lab code: {code}  cores: {os.cpu_count()}  load: {_load()}{hidden}")
    if peer is not None:
        print(f"peer: {peer.directory} (node {peer.version()})")
    rows: list[Row] = []
    redis_server = start_redis()
    try:
        if "storm" in wanted:
            rows += _storm_rows(code, redis_server.url, args, extra)
        if "late" in wanted:
            from bench import late

            rows += late.rows(code, redis_server.url, args, extra)
        if "fanout" in wanted:
            rows += _fanout_rows(code, redis_server.url, args, extra)
        if "reads" in wanted or "memory" in wanted:
            rows += _reads_memory_rows(code, redis_server.url, args, extra, wanted)
    finally:
        redis_server.stop()
    if "cold" in wanted:
        lab_s, floor_s, peer_s = cold_start(code, peer)
        rows.append(
            Row(
                "cold start to first initialize",
                f"{lab_s:.2f} s",
                f"{floor_s:.2f} s",
                ratio(lab_s, floor_s),
                *_peer_cells(peer_s, lab_s, "{:.2f} s"),
            )
        )
    print(f"load at the end: {_load()}")
    print()
    print_table(rows, peer is not None)


def _load() -> str:
    """The load averages (1, 5, 15 min): every figure of a run is read beside them."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
