#!/usr/bin/env python3
"""Measurement: what hostile clients cost the lab (docs/security.md "Hostile clients",
docs/performance.md "Hostile neighbours").

Each attack runs against a fresh local redis-server and a server process with the
default settings (loopback, free ports). Not a test: figures only.

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
* ``slowbody``: the server at ``--nofile`` again, then ``--slow-bodies`` connections
  that each send a whole POST head announcing 1,000 bytes of body and then one byte a
  second (connecting again when closed); meanwhile a normal client (the SDK's flow)
  tries every ``--every`` seconds for ``--hold`` seconds: how many tries were served,
  how the server closed the slow connections (the status it answered), its log lines.
* ``reconnect``: the server at ``--nofile`` again, then ``--reconnecting`` slow
  senders (more than the cap holds), half sending nothing and half the first lines
  of a request head, each connecting again the moment the server closes it, no
  pause (in a process of their own); meanwhile one keep-alive connection that never
  reconnects asks ``GET /healthz`` ``--requests`` times ``--pause`` s apart, then
  httpx with a pool of one does, then the SDK's flow is tried as many times: served
  of each, their latencies, and the TCP connections httpx had to open.
* ``dashboard-memory``: a run of ``--events`` evidence events of the widest kind a client
  can make (written to Redis as the recorder writes them), then ``--viewers`` dashboard
  streams, half of them never read and half read 16 KB a second: the server's RSS
  before, with them open and after they closed; then a normal client's flow alone and
  beside ``--dashboards`` dashboards that read all they are sent.
* dashboards that never read: scripts/bench_unread_dashboards.py, a script of its own
  that uses this one's helpers.
* ``flood``: the template scenario (and its updater); one session subscribes to
  ``--uris`` distinct URIs, 20 requests in flight, and 3 s in another client
  subscribes to one: how late that client's notification is after it was due
  (``--delay`` after its subscribe), and the state keys left once both closed.

    .venv/bin/python scripts/bench_hostile.py [redis] [dashboard] [slow] [--set NAME=VALUE]
    .venv/bin/python scripts/bench_hostile.py slowbody --hold 40
    .venv/bin/python scripts/bench_hostile.py reconnect --reconnecting 150
    .venv/bin/python scripts/bench_hostile.py flood --set max_subscriptions_per_session=5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import re
import socket
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Protocol

import httpx2
import redis

from mcp_lab import contract, protocol, untrusted

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_lab.process.embedded_redis import EmbeddedRedis, free_port, start_redis
from tests.support.lab import LabProcess, lab_env

_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_READY = r"\[lab\] server ready .*relay=subscribed"
_URI = "test://review/status"


class Counter(Protocol):
    value: int


class EventLike(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...


# Settings other than the defaults, from --set NAME=VALUE (MCP_TEST_NAME).
SETTINGS: dict[str, str] = {}


def start(redis_url: str, port: int, nofile: int | None = None) -> LabProcess:
    """``mcp-lab server`` with the default settings (and --set) on ``port``, and an
    open-file limit when ``nofile`` is given."""
    env = lab_env(redis_url, port=str(port), **SETTINGS)
    command = [sys.executable, "-m", "mcp_lab", "server"]
    if nofile is not None:
        set_limit = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
            "os.execv(sys.executable, [sys.executable, '-m', 'mcp_lab', 'server'])"
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


async def slow_body(port: int, stop: asyncio.Event, length: int, seen: dict[str, int]) -> None:
    """A connection that sends a whole POST head to /mcp announcing ``length`` bytes of
    body, then one byte a second; when the server closes it, ``seen`` counts how (the
    status it answered, or none) and it connects again, until ``stop``."""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            seen["could not connect"] = seen.get("could not connect", 0) + 1
            await asyncio.sleep(1)
            continue
        answer = b""
        try:
            writer.write(head)
            while not stop.is_set():
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), 1.0)
                except TimeoutError:
                    writer.write(b" ")
                    continue
                if not data:
                    break
                answer += data
        except OSError:
            pass
        finally:
            writer.close()
        if stop.is_set() and not answer:
            return
        status = answer[9:12].decode("latin-1") if answer.startswith(b"HTTP/1.1 ") else ""
        how = f"answered {status}" if status else "closed without an answer"
        seen[how] = seen.get(how, 0) + 1


async def slow_bodies(count: int, nofile: int, hold: float, every: float) -> None:
    """``slowbody``: ``count`` connections each send a POST head announcing 1,000 bytes,
    then a byte a second (each connects again when closed); meanwhile a normal client
    (the SDK's flow) tries every ``every`` seconds, each try bounded by ``every``."""
    embedded: EmbeddedRedis = start_redis()
    port = free_port()
    server = start(embedded.url, port, nofile=nofile)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await asyncio.wait_for(normal_flow(url), 30)  # warm-up, before the attack
        before = server.mark()
        stop = asyncio.Event()
        seen: dict[str, int] = {}
        slow = [asyncio.create_task(slow_body(port, stop, 1000, seen)) for _ in range(count)]
        await asyncio.sleep(2)  # every slow connection has sent its head
        served: list[str] = []
        started = time.monotonic()
        while time.monotonic() - started < hold:
            began = time.monotonic()
            try:
                took = await asyncio.wait_for(normal_flow(url), every)
                served.append(f"{took:.2f}s")
            except Exception:  # a failed try, whatever the SDK raised
                served.append("failed")
            await asyncio.sleep(max(0.0, every - (time.monotonic() - began)))
        stop.set()
        await asyncio.gather(*slow)
        lines = server.lines[before:]
        tracebacks = sum(1 for line in lines if line.startswith("Traceback"))
        ok = sum(1 for s in served if s != "failed")
        closes = ", ".join(f"{n} {how}" for how, n in sorted(seen.items())) or "none"
        print(
            f"slowbody: {count} connections sending a body at 1 byte/s at an open-file limit "
            f"of {nofile}, {hold:.0f} s: a normal client served {ok} of {len(served)} tries "
            f"({' '.join(served)}); slow connections closed by the server: {closes}; "
            f"{len(lines)} log lines ({tracebacks} tracebacks)"
        )
        for line in [line for line in lines if re.search(r"\[(lab|guard)\]", line)][:8]:
            print(f"  log: {line[:200]}")
    finally:
        server.stop()
        embedded.stop()


async def reconnecting_sender(port: int, stop: asyncio.Event, partial: bool, seen: Counter) -> None:
    """A slow sender that never pauses: it connects, sends nothing (or, when
    ``partial``, the first lines of a request head), waits for the server to close it
    and connects again at once, until ``stop``; ``seen`` counts its connections."""
    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode() if partial else b""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0)  # refused by the kernel: again at once, but let others run
            continue
        seen.value += 1
        try:
            if head:
                writer.write(head)
            while not stop.is_set():
                try:
                    if await asyncio.wait_for(reader.read(1024), 1.0) == b"":
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass
        finally:
            writer.close()


def reconnecting_attack(port: int, count: int, stop: EventLike, seen: Counter) -> None:
    """``count`` :func:`reconnecting_sender` (half of them sending part of a head), in
    a process of their own (so that they do not slow the normal client's event loop
    down), until ``stop`` is set."""

    async def attack() -> None:
        stopping = asyncio.Event()
        senders = [
            asyncio.create_task(reconnecting_sender(port, stopping, bool(at % 2), seen))
            for at in range(count)
        ]
        await asyncio.to_thread(stop.wait, 600)  # bounded: the bench is over long before
        stopping.set()
        await asyncio.gather(*senders)

    asyncio.run(attack())


def first_error(exc: BaseException) -> str:
    """The first error inside ``exc`` (the SDK raises them in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:80]


async def one_connection_client(port: int, requests: int, pause: float) -> list[str]:
    """One keep-alive connection that never reconnects (a raw socket) asking
    ``GET /healthz`` ``requests`` times, ``pause`` s apart: each request's latency, or
    "closed" for each left once the server closed the connection."""
    results: list[str] = []
    request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(requests):
            began = time.perf_counter()
            try:
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                await asyncio.wait_for(reader.readexactly(int(length[1]) if length else 0), 5)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                break
            took = time.perf_counter() - began
            results.append(f"{took * 1000:.0f}ms" if head.startswith(b"HTTP/1.1 200") else "failed")
            await asyncio.sleep(pause)
    finally:
        writer.close()
    return results + ["closed"] * (requests - len(results))


async def keep_alive_client(base: str, requests: int, pause: float) -> tuple[list[str], int]:
    """One keep-alive connection (httpx, a pool of one) asking ``GET /healthz``
    ``requests`` times, ``pause`` s apart: each request's latency (or the error it
    met) and how many TCP connections the client had to open for them."""
    connects = 0

    async def trace(name: str, info: dict) -> None:
        nonlocal connects
        if name.endswith("connect_tcp.complete"):
            connects += 1

    limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=60)
    results: list[str] = []
    async with httpx2.AsyncClient(timeout=5, limits=limits) as http:
        for _ in range(requests):
            began = time.perf_counter()
            try:
                reply = await http.get(f"{base}/healthz", extensions={"trace": trace})
                took = time.perf_counter() - began
                results.append(f"{took * 1000:.0f}ms" if reply.status_code == 200 else "failed")
            except httpx2.HTTPError as exc:
                results.append(f"failed ({first_error(exc)})")
            await asyncio.sleep(pause)
    return results, connects


async def reconnecting_senders(
    count: int, nofile: int, requests: int, pause: float, every: float
) -> None:
    """``reconnect``: ``count`` slow senders (more than the cap holds: half send nothing,
    half part of a head; in a process of their own) reconnect the moment they are
    closed; meanwhile a keep-alive connection that never reconnects asks ``requests``
    times, ``pause`` s apart, then httpx with a pool of one as many times, then the
    SDK's flow is tried as many times (each bounded by ``every``): served of each,
    and latencies."""
    embedded: EmbeddedRedis = start_redis()
    port = free_port()
    server = start(embedded.url, port, nofile=nofile)
    base = f"http://127.0.0.1:{port}"
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    seen = spawn.RawValue("q", 0)
    attacker = spawn.Process(target=reconnecting_attack, args=(port, count, stop, seen))
    try:
        await asyncio.wait_for(normal_flow(f"{base}/mcp"), 30)  # warm-up, before the attack
        before = server.mark()
        attacker.start()
        await asyncio.sleep(5)  # the attacker started, the cap full and its senders cycling
        cycled = seen.value
        started = time.monotonic()
        alone = await one_connection_client(port, requests, pause)
        kept, connects = await keep_alive_client(base, requests, pause)
        flows: list[str] = []
        for _ in range(requests):
            began = time.perf_counter()
            try:
                took = await asyncio.wait_for(normal_flow(f"{base}/mcp"), every)
                flows.append(f"{took:.2f}s")
            except Exception as exc:  # a failed try, whatever the SDK raised
                flows.append(f"failed ({first_error(exc)})")
            await asyncio.sleep(max(0.0, pause - (time.perf_counter() - began)))
        window = time.monotonic() - started
        rate = (seen.value - cycled) / window
        stop.set()
        await asyncio.to_thread(attacker.join, 30)
        lines = server.lines[before:]
        tracebacks = sum(1 for line in lines if line.startswith("Traceback"))
        ok_alone = sum(1 for r in alone if r.endswith("ms"))
        ok = sum(1 for r in kept if not r.startswith("failed"))
        ok_flows = sum(1 for f in flows if not f.startswith("failed"))
        print(
            f"reconnect: {count} slow senders reconnecting without a pause (about {rate:.0f} "
            f"connections/s) at an open-file limit of {nofile}, requests {pause:g} s apart: "
            f"one keep-alive connection that does not reconnect served {ok_alone} of "
            f"{len(alone)} ({', '.join(alone)}); httpx with a pool of one served {ok} of "
            f"{len(kept)} ({', '.join(kept)}; {connects} TCP connections opened for them); "
            f"the SDK's flow served {ok_flows} of "
            f"{len(flows)} tries ({', '.join(flows)}); {len(lines)} log lines "
            f"({tracebacks} tracebacks)"
        )
        for line in [line for line in lines if re.search(r"\[lab\] connections", line)][:4]:
            print(f"  log: {line[:220]}")
    finally:
        stop.set()
        if attacker.is_alive():
            attacker.join(5)
        if attacker.is_alive():
            attacker.kill()
        server.stop()
        embedded.stop()


async def _subscribe_many(
    http: httpx2.AsyncClient, url: str, headers: dict[str, str], uris: list[str], in_flight: int
) -> tuple[int, int]:
    """``resources/subscribe`` to each of ``uris``, ``in_flight`` at a time; how many were
    accepted and how many refused with an error."""
    gate = asyncio.Semaphore(in_flight)
    accepted = refused = 0

    async def one(at: int, uri: str) -> None:
        nonlocal accepted, refused
        body = {"jsonrpc": "2.0", "id": at + 1, "method": "resources/subscribe"}
        body["params"] = {"uri": uri}
        async with gate:
            reply = await http.post(url, content=json.dumps(body), headers=headers)
        answer = sse_data(reply.text) if "data:" in reply.text else reply.json()
        if answer is not None and "error" in answer:
            refused += 1
        else:
            accepted += 1

    await asyncio.gather(*(one(at, uri) for at, uri in enumerate(uris)))
    return accepted, refused


async def victim_lateness(url: str, delay: float, timeout: float) -> float:
    """A normal client subscribes to one URI of the template and waits for its update;
    how late it came, in seconds after it was due (subscribe answered + ``delay``)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    notified = asyncio.Event()

    async def on_message(message: object) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == protocol.UPDATED:
            notified.set()

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            await session.read_resource("test://review/victim")
            await session.subscribe_resource("test://review/victim")
            due = time.monotonic() + delay
            await asyncio.wait_for(notified.wait(), timeout)
            return time.monotonic() - due


async def subscription_flood(uris: int, delay: float, timeout: float) -> None:
    """``flood``: on the template scenario, one session subscribes to ``uris`` distinct
    URIs (20 requests in flight); 3 s into it a victim subscribes to one; how late the
    victim's notification is, and the state keys the flooder leaves once it closed."""
    settings = {"scenario": "template", "update_delay_seconds": str(delay), **SETTINGS}
    embedded = start_redis()
    client = redis.Redis.from_url(embedded.url)
    port = free_port()
    env = lab_env(embedded.url, **settings)
    updater = LabProcess("updater", [sys.executable, "-m", "mcp_lab", "updater"], env)
    updater.wait_for(r"\[updater\] ready", timeout=30)
    SETTINGS.update(settings)  # the server's (start) as the updater's
    server = start(embedded.url, port)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=120) as http:
            headers = await initialize(http, url, "flooder")
            started = time.perf_counter()
            wanted = [f"test://review/flood-{at}" for at in range(uris)]
            flood = asyncio.create_task(_subscribe_many(http, url, headers, wanted, 20))
            await asyncio.sleep(3)  # the victim comes while the flood goes on
            late = await victim_lateness(url, delay, timeout)
            accepted, refused = await flood
            took = time.perf_counter() - started
            (await http.delete(url, headers=headers)).raise_for_status()
        await asyncio.sleep(delay + 2)  # the flooder's jobs still due come and go
        keys = sum(1 for _ in client.scan_iter(match="mcp:state:*", count=1000))
        print(
            f"flood: one session subscribed to {accepted} of {uris} URIs ({refused} refused) "
            f"in {took:.1f} s; a victim's notification {late:.2f} s after it was due; "
            f"{keys} state keys left in Redis after the flooder closed its session"
        )
    finally:
        server.stop()
        updater.stop()
        client.close()
        embedded.stop()


# The widest character a client can send (4 bytes in UTF-8, 12 in a JSON \u escape).
_WIDE = "\U0001f600"


def widest_events(count: int, per_session: int) -> list[dict[str, str]]:
    """``count`` evidence entries as the recorder writes them (``contract.Event.fields``),
    each as large as a client can make one: an unknown method and a URI at their limits
    (services/mcp_lab/untrusted.py), from a client whose name and version are at theirs; the
    error the server answers such a request with. ``per_session`` to a session."""
    started = int(time.time() * 1000) - count
    client = untrusted.cut(_WIDE * 1000, untrusted.CLIENT_NAME_CHARS)
    version = untrusted.cut(_WIDE * 1000, untrusted.CLIENT_VERSION_CHARS)
    method = untrusted.cut(_WIDE * 100_000, untrusted.METHOD_CHARS)
    uri = untrusted.cut(_WIDE * 100_000, untrusted.URI_CHARS)
    sessions = [uuid.uuid4().hex for _ in range(count // per_session + 1)]
    return [
        contract.Event(
            ts_ms=started + at,
            session=sessions[at // per_session],
            client=client,
            client_version=version,
            protocol=protocol.HANDSHAKE_VERSION,
            transport=contract.Transport.STREAMABLE_HTTP,
            direction="in",
            method=method,
            uri=uri,
            error=-32601,
        ).fields()
        for at in range(count)
    ]


def rss_mb(pid: int) -> float:
    """A process's resident memory (Linux: /proc), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    return 0.0


def children_rss_mb(pid: int) -> float:
    """The resident memory of a process's children (the server's report worker), MB."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                total += rss_mb(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return total


async def settled_rss(pid: int, bound: float) -> float:
    """``pid``'s RSS once it has moved less than 2 MB over 3 s (at most ``bound`` s)."""
    deadline = time.monotonic() + bound
    samples = [rss_mb(pid)]
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        samples.append(rss_mb(pid))
        if len(samples) >= 7 and max(samples[-7:]) - min(samples[-7:]) < 2:
            break
    return samples[-1]


def stream_head(port: int) -> bytes:
    return f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


async def slow_viewer(
    port: int, rate: int, opened: asyncio.Event, reported: asyncio.Event, stop: asyncio.Event
) -> None:
    """A dashboard stream read ``rate`` bytes a second (0: never read); ``reported``
    once the start of a report came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if not rate and isinstance(writer.transport, asyncio.Transport):
        writer.transport.pause_reading()
    try:
        writer.write(stream_head(port))
        await writer.drain()
        opened.set()
        seen = b""
        while not stop.is_set():
            if rate:
                data = await reader.read(rate)
                if not data:
                    return
                seen = seen[-64:] + data
                if b"event: report" in seen:
                    reported.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        writer.close()


class Dashboard(threading.Thread):
    """A dashboard reading its stream as fast as it comes (as a browser does), in a
    thread of its own: the flow timed beside it shares no event loop with it."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.first = threading.Event()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.sendall(stream_head(port))

    def run(self) -> None:
        tail, in_report = b"", False
        with contextlib.suppress(OSError):
            while data := self.sock.recv(1 << 20):
                text, at = tail + data, 0
                while True:
                    mark = b"\n\n" if in_report else b"event: report"
                    found = text.find(mark, at)
                    if found < 0:
                        break
                    at = found + len(mark)
                    if in_report:
                        self.first.set()
                    in_report = not in_report
                tail = text[-16:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


async def dashboard_memory(
    events: int, per_session: int, viewers: int, dashboards: int, timeout: float
) -> None:
    """``dashboard-memory``: a run of ``events`` of the widest events, then ``viewers``
    dashboard streams (half never read, half read 16 KB/s): the server's RSS before,
    with them open and after they closed; then a normal flow alone and beside
    ``dashboards`` dashboards that read all they are sent, three times each."""
    embedded = start_redis()
    client = redis.Redis.from_url(embedded.url)
    port = free_port()
    server = start(embedded.url, port)
    pid = server.process.pid
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        pipe = client.pipeline(transaction=False)
        for fields in widest_events(events, per_session):
            pipe.xadd(contract.EVENTS_STREAM, fields)  # type: ignore[arg-type]
        pipe.execute()
        kept = int(client.memory_usage(contract.EVENTS_STREAM, samples=0) or 0)
        await asyncio.wait_for(normal_flow(url), timeout)  # warm-up
        alone = [await asyncio.wait_for(normal_flow(url), timeout) for _ in range(3)]
        idle = await settled_rss(pid, 20)
        stop = asyncio.Event()
        opened = [asyncio.Event() for _ in range(viewers)]
        reported = [asyncio.Event() for _ in range(viewers)]
        held = [
            asyncio.create_task(
                slow_viewer(port, 16_384 if at % 2 else 0, opened[at], reported[at], stop)
            )
            for at in range(viewers)
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), 60)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in reported[1::2])), 180)
        with_viewers = await settled_rss(pid, 120)
        worker = children_rss_mb(pid)
        stop.set()
        await asyncio.gather(*held, return_exceptions=True)
        after = await settled_rss(pid, 30)
        watching = [Dashboard(port) for _ in range(dashboards)]
        for dashboard in watching:
            dashboard.start()
        for dashboard in watching:
            await asyncio.to_thread(dashboard.first.wait, 180)
        beside = []
        for _ in range(3):
            try:
                beside.append(f"{await asyncio.wait_for(normal_flow(url), timeout):.2f}")
            except TimeoutError:
                beside.append(f">{timeout:.0f}")
            await asyncio.sleep(1)  # the dashboards are sent the report of that flow
        for dashboard in watching:
            dashboard.close()
        print(
            f"dashboard-memory: {events} events of the widest kind ({kept / 1e6:.0f} MB in "
            f"Redis); server RSS {idle:.0f} MB before, {with_viewers:.0f} MB with {viewers} "
            f"/api/stream open (half never read, half read 16 KB/s; +{with_viewers - idle:.0f} "
            f"MB; its children {worker:.0f} MB), {after:.0f} MB after they closed; normal "
            f"flow {' / '.join(f'{t:.2f}' for t in alone)} s alone, {' / '.join(beside)} s "
            f"with {dashboards} dashboards reading"
        )
    finally:
        server.stop()
        client.close()
        embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attacks", nargs="*", default=["redis", "dashboard", "slow"])
    parser.add_argument("--name-bytes", type=int, default=1_000_000)
    parser.add_argument("--pings", type=int, default=300)
    parser.add_argument("--streams", type=int, default=150)
    parser.add_argument("--flow-timeout", type=float, default=120.0)
    parser.add_argument("--events", type=int, default=8_800)
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--viewers", type=int, default=40)
    parser.add_argument("--dashboards", type=int, default=5)
    parser.add_argument("--slow", type=int, default=300)
    parser.add_argument("--nofile", type=int, default=256)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--slow-bodies", type=int, default=92)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--reconnecting", type=int, default=150)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--pause", type=float, default=0.5)
    parser.add_argument("--uris", type=int, default=3000)
    parser.add_argument("--delay", type=float, default=5.0)
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
        elif attack == "slowbody":
            asyncio.run(slow_bodies(args.slow_bodies, args.nofile, args.hold, args.every))
        elif attack == "reconnect":
            asyncio.run(
                reconnecting_senders(
                    args.reconnecting, args.nofile, args.requests, args.pause, args.every
                )
            )
        elif attack == "flood":
            asyncio.run(subscription_flood(args.uris, args.delay, args.flow_timeout))
        elif attack == "dashboard-memory":
            asyncio.run(
                dashboard_memory(
                    args.events, args.per_session, args.viewers, args.dashboards, args.flow_timeout
                )
            )
        else:
            parser.error(
                f"unknown attack {attack!r}: redis, dashboard, slow, slowbody, reconnect, "
                "flood or dashboard-memory (unread dashboards: scripts/bench_unread_dashboards.py)"
            )


if __name__ == "__main__":
    main()
