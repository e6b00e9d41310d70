#!/usr/bin/env python3
"""Measurement: what hostile clients cost the lab (docs/security.md "Hostile clients",
docs/faults.md).

Three attacks, each against a fresh local redis-server and a server
process with the default settings (loopback, free ports). Not a test: figures only.

* ``redis``: one session whose ``clientInfo`` is ``--name-bytes`` long (1 MB), then
  ``--pings`` pings in it; Redis ``used_memory`` before and after.
* ``dashboard``: ``--streams`` dashboard streams (``/api/stream``) held open, then a
  normal client's flow (initialize, list, read, subscribe, read, close) timed;
  Redis connections while the streams are open, and streams refused (503).
* ``slow``: the server started with an open-file limit of ``--nofile`` (soft and
  hard), then ``--slow`` connections that send a request head a few bytes at a
  time and never finish it, held for ``--hold`` seconds; meanwhile a fresh
  ``GET /healthz`` every second (answered or not), and the server's log lines
  and tracebacks over the window.

    .venv/bin/python scripts/bench_hostile.py [redis] [dashboard] [slow] [--set NAME=VALUE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
import warnings
from pathlib import Path

import httpx2
import redis

from services import protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.process.embedded_redis import EmbeddedRedis, free_port, start_redis
from tests.support.lab import LabProcess, lab_env

_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_READY = r"\[lab\] server ready .*relay=subscribed"
_URI = "test://review/status"


# Settings other than the defaults, from --set NAME=VALUE (MCP_TEST_NAME).
SETTINGS: dict[str, str] = {}


def start(redis_url: str, port: int, nofile: int | None = None) -> LabProcess:
    """``mcp-lab server`` with the default settings (and --set) on ``port``, and an
    open-file limit when ``nofile`` is given."""
    env = lab_env(redis_url, port=str(port), **SETTINGS)
    command = [sys.executable, "-m", "services", "server"]
    if nofile is not None:
        set_limit = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
            "os.execv(sys.executable, [sys.executable, '-m', 'services', 'server'])"
        )
        command = [sys.executable, "-c", set_limit]
    proc = LabProcess(f"server:{port}", command, env)
    proc.wait_for(_READY, timeout=30)
    return proc


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def sse_data(text: str) -> dict | None:
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            parsed: dict = json.loads(line[5:])
            return parsed
    return None


async def initialize(http: httpx2.AsyncClient, url: str, name: str) -> dict[str, str]:
    body = protocol.initialize_request(name, "1.0", protocol.HANDSHAKE_VERSION, request_id=0)
    reply = await http.post(url, content=json.dumps(body), headers=_HEADERS)
    reply.raise_for_status()
    headers = {
        **_HEADERS,
        "Mcp-Session-Id": reply.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    done = protocol.initialized_notification()
    (await http.post(url, content=json.dumps(done), headers=headers)).raise_for_status()
    return headers


async def redis_growth(name_bytes: int, pings: int) -> None:
    embedded = start_redis()
    client = redis.Redis.from_url(embedded.url)
    port = free_port()
    server = start(embedded.url, port)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=120) as http:
            await initialize(http, url, "warm-up")  # imports and first writes, not counted
            before = used_memory(client)
            started = time.perf_counter()
            headers = await initialize(http, url, "n" * name_bytes)
            sent = 0
            for at in range(pings):
                body = json.dumps({"jsonrpc": "2.0", "id": at + 1, "method": "ping"})
                sent += len(body)
                (await http.post(url, content=body, headers=headers)).raise_for_status()
            took = time.perf_counter() - started
        lines = server.matching(r"session=")
        longest = max((len(line) for line in server.lines), default=0)
        after = used_memory(client)
        print(
            f"redis: clientInfo.name of {name_bytes} bytes + {pings} pings "
            f"({sent} bytes of pings) in {took:.1f} s: used_memory {before / 1e6:.1f} -> "
            f"{after / 1e6:.1f} MB (+{(after - before) / 1e6:.2f} MB); "
            f"{len(lines)} event log lines, longest log line {longest} chars"
        )
    finally:
        server.stop()
        client.close()
        embedded.stop()


async def hold_stream(http: httpx2.AsyncClient, url: str, opened: asyncio.Event) -> int:
    """Open one dashboard stream and read it until cancelled; its status code."""
    async with http.stream("GET", url) as reply:
        opened.set()
        if reply.status_code != 200:
            return reply.status_code
        async for _ in reply.aiter_bytes():
            pass
    return 200


async def normal_flow(url: str) -> float:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    started = time.perf_counter()
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_resources()
            await session.read_resource(_URI)
            await session.subscribe_resource(_URI)
            await session.read_resource(_URI)
    return time.perf_counter() - started


async def dashboard_streams(streams: int, timeout: float) -> None:
    embedded = start_redis()
    client = redis.Redis.from_url(embedded.url)
    port = free_port()
    server = start(embedded.url, port)
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.wait_for(normal_flow(f"{base}/mcp"), timeout)  # warm-up
        alone = await asyncio.wait_for(normal_flow(f"{base}/mcp"), timeout)
        limits = httpx2.Limits(max_connections=streams + 10)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=None), limits=limits) as http:
            events = [asyncio.Event() for _ in range(streams)]
            tasks = [
                asyncio.create_task(hold_stream(http, f"{base}/api/stream", e)) for e in events
            ]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
            connections = int(client.info("clients")["connected_clients"])
            try:
                flow = f"{await asyncio.wait_for(normal_flow(f'{base}/mcp'), timeout):.2f} s"
            except TimeoutError:
                flow = f"over {timeout:.0f} s (gave up)"
            peak = max(connections, int(client.info("clients")["connected_clients"]))
            refused = sum(1 for t in tasks if t.done() and t.result() != 200)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        print(
            f"dashboard: normal flow alone {alone:.2f} s; with {streams} /api/stream open "
            f"({refused} refused) {flow}; Redis connections with the streams open: {peak}"
        )
    finally:
        server.stop()
        client.close()
        embedded.stop()


async def slow_head(port: int, stop: asyncio.Event) -> bool:
    """One connection sending a request head a few bytes at a time; True if the
    server closed it before ``stop``."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    try:
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        while not stop.is_set():
            await writer.drain()
            try:
                if await asyncio.wait_for(reader.read(1024), 1.0) == b"":
                    return True
            except TimeoutError:
                pass
            writer.write(b"X-Slow: 1\r\n")
        return False
    except OSError:
        return True
    finally:
        writer.close()


def healthz(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.settimeout(3)
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


async def slow_connections(count: int, nofile: int, hold: float) -> None:
    embedded: EmbeddedRedis = start_redis()
    port = free_port()
    server = start(embedded.url, port, nofile=nofile)
    try:
        before = server.mark()
        stop = asyncio.Event()
        slow = [asyncio.create_task(slow_head(port, stop)) for _ in range(count)]
        answered = asked = 0
        started = time.monotonic()
        while time.monotonic() - started < hold:
            await asyncio.sleep(1)
            asked += 1
            answered += await asyncio.to_thread(healthz, port)
        stop.set()
        closed = sum(await asyncio.gather(*slow))
        lines = server.lines[before:]
        tracebacks = sum(1 for line in lines if line.startswith("Traceback"))
        after = healthz(port)
        print(
            f"slow: {count} slow connections at an open-file limit of {nofile}, {hold:.0f} s: "
            f"/healthz answered {answered} of {asked} during, "
            f"{'answered' if after else 'not answered'} after; "
            f"{closed} slow connections closed by the server; "
            f"{len(lines)} log lines ({tracebacks} tracebacks)"
        )
    finally:
        server.stop()
        embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attacks", nargs="*", default=["redis", "dashboard", "slow"])
    parser.add_argument("--name-bytes", type=int, default=1_000_000)
    parser.add_argument("--pings", type=int, default=300)
    parser.add_argument("--streams", type=int, default=150)
    parser.add_argument("--flow-timeout", type=float, default=120.0)
    parser.add_argument("--slow", type=int, default=300)
    parser.add_argument("--nofile", type=int, default=256)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting other than its default (dashboard_max_streams=200)",
    )
    args = parser.parse_args()
    for item in args.set:
        name, _, value = item.partition("=")
        SETTINGS[name.strip().lower()] = value
    warnings.simplefilter("ignore")  # the SDK's deprecation of resources/subscribe
    for attack in args.attacks:
        if attack == "redis":
            asyncio.run(redis_growth(args.name_bytes, args.pings))
        elif attack == "dashboard":
            asyncio.run(dashboard_streams(args.streams, args.flow_timeout))
        elif attack == "slow":
            asyncio.run(slow_connections(args.slow, args.nofile, args.hold))
        else:
            parser.error(f"unknown attack {attack!r}: redis, dashboard or slow")


if __name__ == "__main__":
    main()
