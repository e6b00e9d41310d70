#!/usr/bin/env python3
"""Measurement: server memory held by abandoned sessions, and what idle expiry frees.

Starts a local redis-server and one server (loopback), then, for each round:
opens N Streamable HTTP sessions that initialize and walk away (no DELETE, no
GET stream, as real clients leave them), reads the server's resident memory
(/proc) and its /healthz session count, waits (bounded) until idle expiry has
closed every one, and reads them again, with the kept-event keys left in Redis.
Two rounds show whether memory freed by expiry is reused or keeps growing.
Not a test: figures only.

    .venv/bin/python scripts/bench_idle.py [--sessions 1000] [--idle 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx2
import redis

from mcp_lab import protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_lab.process.embedded_redis import free_port, start_redis
from tests.support.lab import LabProcess, start_server

_CONCURRENCY = 16
_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_INITIALIZE = protocol.initialize_request("bench-idle")
_IDLE_END = r"\[session/end\] idle"
_INITIALIZED = protocol.initialized_notification()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def abandon_one(http: httpx2.AsyncClient, url: str) -> None:
    """Initialize a session and leave it open."""
    reply = await http.post(url, json=_INITIALIZE, headers=_HEADERS)
    reply.raise_for_status()
    session = reply.headers["mcp-session-id"]
    headers = {**_HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    (await http.post(url, json=_INITIALIZED, headers=headers)).raise_for_status()


async def abandon(url: str, count: int) -> float:
    """Open ``count`` sessions, ``_CONCURRENCY`` at a time; seconds taken."""
    started = time.perf_counter()
    limits = httpx2.Limits(max_connections=_CONCURRENCY)
    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        queue = iter(range(count))

        async def worker() -> None:
            for _ in queue:
                await abandon_one(http, url)

        await asyncio.gather(*(worker() for _ in range(_CONCURRENCY)))
    return time.perf_counter() - started


async def open_sessions(base: str) -> int:
    async with httpx2.AsyncClient(timeout=10) as http:
        return int((await http.get(f"{base}/healthz")).json()["http_sessions"])


async def wait_until_closed(base: str, timeout: float) -> float:
    """Seconds until /healthz shows no open session (polled: it has no push)."""
    started = time.perf_counter()
    while await open_sessions(base):
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"sessions still open after {timeout:.0f} s")
        await asyncio.sleep(0.5)
    return time.perf_counter() - started


def resume_keys(client: redis.Redis) -> int:
    return sum(1 for _ in client.scan_iter(match="mcp:resume:*", count=1000))


def run(server: LabProcess, url: str, client: redis.Redis, args: argparse.Namespace) -> None:
    pid = server.process.pid
    base = url.removesuffix("/mcp")
    asyncio.run(abandon(url, 1))  # warm-up: the first session pays for imports
    asyncio.run(wait_until_closed(base, args.idle + 60))
    print(f"server RSS at start (after one warm-up session): {rss_mb(pid):.1f} MB")
    for round_no in range(1, args.rounds + 1):
        before = rss_mb(pid)
        took = asyncio.run(abandon(url, args.sessions))
        held = asyncio.run(open_sessions(base))
        full = rss_mb(pid)
        if held < args.sessions:
            print(f"  only {held} open: some expired while the rest were opened (raise --idle)")
        print(
            f"round {round_no}: {args.sessions} sessions abandoned in {took:.1f} s; "
            f"open={held} RSS {before:.1f} -> {full:.1f} MB "
            f"(+{full - before:.1f} MB, {(full - before) * 1024 / args.sessions:.1f} KiB/session); "
            f"resume keys in Redis={resume_keys(client)}"
        )
        waited = asyncio.run(wait_until_closed(base, args.idle + args.sessions / 20 + 120))
        idle_ends = len(server.matching(_IDLE_END))
        print(
            f"round {round_no}: all closed {waited:.1f} s later; RSS {rss_mb(pid):.1f} MB; "
            f"resume keys in Redis={resume_keys(client)}; "
            f"idle session/end lines so far={idle_ends}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=60, help="MCP_TEST_SESSION_IDLE_SECONDS")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not 1 <= args.sessions <= 20_000:
        parser.error("--sessions must be 1..20000")
    redis_server = start_redis()
    server = None
    try:
        server = start_server(
            redis_server.url,
            free_port(),
            session_idle_seconds=str(args.idle),
            max_sessions=str(args.sessions + 10),
        )
        url = next(line.split("url=")[1].split()[0] for line in server.lines if "url=" in line)
        client = redis.Redis.from_url(redis_server.url)
        run(server, url, client, args)
        client.close()
    finally:
        if server is not None:
            server.stop()
        redis_server.stop()


if __name__ == "__main__":
    main()
