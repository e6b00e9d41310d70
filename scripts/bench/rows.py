"""The table rows of the storm, fan-out, reads and memory phases: lab, peer, floor."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from bench.fanout import fanout
from bench.memory import memory_per_session
from bench.procs import SESSION_ENDED, free_port, start_floor, start_lab
from bench.reads import reads_per_second
from bench.storm import StormResult, floor_storm, storm
from bench.table import Row, _peer_cells, pct, ratio


def _flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()


def _storm_rows(code: Path, url: str, args: argparse.Namespace, extra: dict[str, str]) -> list[Row]:
    _flush(url)
    port = free_port()
    procs = start_lab(code, url, port, True, update_delay_seconds="0", **extra)
    try:
        lab = asyncio.run(
            storm(
                port,
                args.storm,
                redis_url=url,
                concurrency=args.concurrency,
                timeout=args.timeout,
                server_pid=procs[0].process.pid,
                ended=lambda: procs[0].count(SESSION_ENDED),
            )
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
    print(lab.summary())
    peer = None
    if args.peer is not None:
        peer_proc = args.peer.start(free_port(), delay=0)
        try:
            peer = asyncio.run(
                floor_storm(
                    peer_proc.port, args.storm, args.concurrency, args.timeout, peer_proc.pid, True
                )
            )
        finally:
            peer_proc.stop()
        print("peer " + peer.summary())
    floor_port = free_port()
    floor_proc = start_floor(floor_port)
    try:
        floor = asyncio.run(
            floor_storm(
                floor_port, args.storm, args.concurrency, args.timeout, floor_proc.process.pid
            )
        )
    finally:
        floor_proc.stop()
    print("floor " + floor.summary())
    n = args.storm

    def refused(r: StormResult) -> int:
        return sum(r.refused.values()) + sum(r.setup_failed.values())

    rate, cpu = lab.sessions_per_second, lab.setup_cpu_ms or 0
    return [
        Row(
            f"storm {n}: refused subscribes",
            str(refused(lab)),
            str(refused(floor)),
            peer="-" if peer is None else str(refused(peer)),
        ),
        Row(
            f"storm {n}: missing notifications",
            str(lab.missing_notifications),
            str(floor.missing_notifications),
            peer="-" if peer is None else str(peer.missing_notifications),
        ),
        Row(
            f"storm {n}: evidence records missing (of {lab.evidence_expected})",
            f"{lab.evidence_missing}{lab.evidence_notes()}",
            "-",
        ),
        Row(
            f"storm {n}: subscribers left after the sessions ended", str(lab.subscribers_left), "-"
        ),
        Row(
            f"storm {n}: setup sessions/s",
            f"{rate:.0f}",
            f"{floor.sessions_per_second:.0f}",
            ratio(floor.sessions_per_second, rate) + " slower",
            *_peer_cells(None if peer is None else peer.sessions_per_second, rate, "{:.0f}"),
        ),
        Row(
            f"storm {n}: server CPU ms per session set up",
            f"{cpu:.2f}",
            f"{floor.setup_cpu_ms or 0:.3f}",
            ratio(cpu, floor.setup_cpu_ms or 0),
            *_peer_cells(None if peer is None else peer.setup_cpu_ms or 0, cpu, "{:.2f}"),
        ),
    ]


def _fanout_rows(
    code: Path, url: str, args: argparse.Namespace, extra: dict[str, str]
) -> list[Row]:
    _flush(url)
    port = free_port()
    # No updater: the benchmark publishes the update itself, once.
    procs = start_lab(
        code, url, port, False, state_scope="shared", update_delay_seconds="3600", **extra
    )
    try:
        lab = asyncio.run(fanout(port, args.fanout, url, args.concurrency, args.timeout))
    finally:
        for proc in procs:
            proc.stop()
    floor_port = free_port()
    floor_proc = start_floor(floor_port, url)
    try:
        floor = asyncio.run(fanout(floor_port, args.fanout, url, args.concurrency, args.timeout))
    finally:
        floor_proc.stop()
    n = args.fanout
    # The peer has no shared update to fan out (one timer per session): its cells stay "-".
    rows = []
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        a, b = pct(lab, q), pct(floor, q)
        rows.append(
            Row(
                f"fan-out {n}: {name} publish to notification",
                f"{a:.1f} ms",
                f"{b:.1f} ms",
                ratio(a, b),
            )
        )
    rows.append(Row(f"fan-out {n}: notifications received", str(len(lab)), str(len(floor))))
    return rows


def _reads_memory_rows(
    code: Path, url: str, args: argparse.Namespace, extra: dict[str, str], wanted: set[str]
) -> list[Row]:
    """Reads (lab, then peer, then floor, one after the other), then memory per idle
    session (lab and floor). The peer's memory is left out: the RSS growth of its
    garbage-collected V8 heap over the sessions went from +30 to -50 KB per session
    between two runs (the reads' garbage given back, or a fresh process warming up)."""
    _flush(url)
    port = free_port()
    procs = start_lab(code, url, port, False, update_delay_seconds="3600", **extra)
    floor_port = free_port()
    floor_proc = start_floor(floor_port)
    peer = args.peer.start(free_port(), delay=3600) if args.peer is not None else None
    rows = []
    try:
        if "reads" in wanted:
            seconds = args.reads_seconds
            reads = reads_per_second
            if args.client == "aiohttp":
                from bench import aiohttp_reads

                reads = aiohttp_reads.reads_per_second
            lab, lab_cpu = asyncio.run(reads(port, procs[0].process.pid, seconds))
            peer_reads: tuple[float, float] | tuple[None, None] = (None, None)
            if peer is not None:
                peer_reads = asyncio.run(reads(peer.port, peer.pid, seconds))
            floor, floor_cpu = asyncio.run(reads(floor_port, floor_proc.process.pid, seconds))
            client = " (aiohttp client)" if args.client == "aiohttp" else ""
            rows.append(
                Row(
                    f"reads/s, one session, concurrency 16{client}",
                    f"{lab:.0f}",
                    f"{floor:.0f}",
                    ratio(floor, lab) + " slower",
                    *_peer_cells(peer_reads[0], lab, "{:.0f}"),
                )
            )
            rows.append(
                Row(
                    "server CPU ms per read",
                    f"{lab_cpu:.2f}",
                    f"{floor_cpu:.3f}",
                    ratio(lab_cpu, floor_cpu),
                    *_peer_cells(peer_reads[1], lab_cpu, "{:.3f}"),
                )
            )
        if "memory" in wanted:
            n = args.sessions
            rss, redis_kb = asyncio.run(
                memory_per_session(port, procs[0].process.pid, n, args.concurrency, url)
            )
            floor_rss, _ = asyncio.run(
                memory_per_session(floor_port, floor_proc.process.pid, n, args.concurrency, None)
            )
            rows.append(
                Row(
                    f"KB per idle session ({n}), server RSS",
                    f"{rss:.1f}",
                    f"{floor_rss:.1f}",
                    ratio(rss, floor_rss),
                )
            )
            rows.append(
                Row(
                    f"KB per idle session ({n}), Redis used_memory",
                    f"{redis_kb:.1f}" if redis_kb is not None else "-",
                    "0",
                )
            )
    finally:
        if peer is not None:
            peer.stop()
        floor_proc.stop()
        for proc in procs:
            proc.stop()
    return rows
