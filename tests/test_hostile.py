"""The attacks of issue 20, replayed against the lab with bounded loops.

Most run the lab in process (tests/inproc.py) on the real Redis of the test; the
ones whose claim is the process boundary (open-file limits, a replica killed with
SIGKILL) start server processes. scripts/bench_hostile.py measures the same
attacks at full size and prints the figures (README, "Hostile clients").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest
import redis

from tests.inproc import http_client
from tests.lab import STATUS_URI, RawSession, connect

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
FORGED = "[resources/subscribe] uri=test://review/status session=forged client=claude-code/1.2.3"
# Every line an in-process server logs starts with its level (tests/inproc.py).
LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def client_of(url: str) -> httpx2.AsyncClient:
    client = http_client(url)
    assert client is not None, f"no in-process server at {url}"
    return client


def redis_bytes(client: redis.Redis) -> int:
    """What the keys of the test's database take in Redis (MEMORY USAGE, all samples)."""
    return sum(
        int(client.memory_usage(key, samples=0) or 0) for key in client.scan_iter(count=1000)
    )


async def test_a_megabyte_client_name_and_300_pings_add_under_5_mb_to_redis(
    inproc, redis_client
) -> None:
    server, url = await inproc.server()
    before = redis_bytes(redis_client)
    raw = RawSession(url, "n" * 1_000_000)
    try:
        await raw.initialize()
        for _ in range(300):
            assert "result" in await raw.request("ping")
        reply = await raw.request("resources/read", {"uri": "test://" + "u" * 1_000_000})
        assert len(json.dumps(reply)) < 2_000, "the unknown URI is echoed whole"
    finally:
        await raw.close()
    await server.await_line(r"\[resources/read\] uri=test://uuu.*error=not-found")
    grown = redis_bytes(redis_client) - before
    assert grown < 5_000_000, f"Redis grew by {grown} bytes"
    assert max(len(line) for line in server.lines) < 10_000


async def test_a_newline_in_a_client_value_never_starts_a_log_line(inproc) -> None:
    server, url = await inproc.server(auth_token="s3cret")
    bearer = {"Authorization": "Bearer s3cret"}
    raw = RawSession(url, f"evil\n{FORGED}")
    raw._http.headers.update(bearer)  # RawSession has no token option
    try:
        await raw.initialize()
        await raw.request("resources/subscribe", {"uri": f"test://x\n{FORGED}"})
        await raw.request("resources/read", {"uri": "test://x\x1b]0;owned\x07\x1b[2J"})
    finally:
        await raw.close()
    async with client_of(url) as client:
        await client.get(url.removesuffix("/mcp") + "/%0A" + FORGED.replace(" ", "%20"))
    await server.await_line(r"\[guard\] GET .* without a valid token")
    await server.await_line(r"\[resources/read\] .*error=not-found")
    forged = [line for line in server.lines if not LOG_LINE.match(line)]
    assert forged == [], forged
    assert not any("\x1b" in line for line in server.lines)
    assert server.matching(r"client=evil\\n\[resources/subscribe\]")


async def test_an_unknown_method_is_not_echoed_whole_and_nothing_big_is_kept(
    inproc, redis_client
) -> None:
    server, url = await inproc.server()
    raw = RawSession(url, "echo")
    try:
        await raw.initialize()
        status, reply = await raw.post({"jsonrpc": "2.0", "id": 9, "method": "m" * 900_000})
        assert status == 200 and reply is not None and reply["error"]["code"] == -32601
        assert len(json.dumps(reply)) < 2_000
        key = f"mcp:resume:{raw.session_id}"
        assert int(redis_client.memory_usage(key, samples=0) or 0) < 20_000
    finally:
        await raw.close()
    assert max(len(line) for line in server.lines) < 10_000


async def test_the_evidence_stream_is_trimmed_by_its_size_too(inproc, redis_client) -> None:
    server, url = await inproc.server(events_max_bytes="65536")
    raw = RawSession(url, "n" * 100_000)
    try:
        await raw.initialize()
        for _ in range(400):  # about 400 bytes of evidence each
            await raw.request("ping")
    finally:
        await raw.close()
    await server.await_line(r"\[evidence\] mcp:events took \d+ bytes .* trimmed", timeout=20)
    used = int(redis_client.memory_usage("mcp:events", samples=0) or 0)
    assert used < 2 * 65536, used


async def next_report(lines: AsyncIterator[str]) -> dict:
    """The next report on a dashboard stream's lines (bounded by the client's timeout)."""
    data = ""
    async for line in lines:
        if line.startswith("data: "):
            data = line[6:]
        elif not line and data:
            parsed: dict = json.loads(data)
            return parsed
    raise AssertionError("the stream ended before a report")


async def client_flow(url: str, name: str) -> None:
    async with connect(url, name) as client:
        await client.session.list_resources()
        await client.read_text()
        await client.session.subscribe_resource(STATUS_URI)
        await client.read_text()


async def test_150_dashboard_streams_cost_a_client_nothing_and_hold_few_redis_connections(
    inproc, redis_client
) -> None:
    _, url = await inproc.server(dashboard_max_streams="200")
    base = url.removesuffix("/mcp")
    await client_flow(url, "warm-up")
    connections = int(redis_client.info("clients")["connected_clients"])
    async with client_of(url) as http, contextlib.AsyncExitStack() as streams:
        opened = [
            await streams.enter_async_context(http.stream("GET", f"{base}/api/stream"))
            for _ in range(150)
        ]
        assert {s.status_code for s in opened} == {200}
        lines = [s.aiter_lines() for s in opened]
        with anyio.fail_after(30):
            await asyncio.gather(*(next_report(each) for each in lines))
        held = int(redis_client.info("clients")["connected_clients"]) - connections
        assert held <= 3, f"150 dashboard streams hold {held} more Redis connections"
        started = time.perf_counter()
        await client_flow(url, "normal-client")
        took = time.perf_counter() - started
        assert took < 1.0, f"a client's flow took {took:.2f} s beside 150 dashboard streams"
        with anyio.fail_after(30):  # every stream is told, from one report built once
            seen = await asyncio.gather(*(next_report(each) for each in lines))
        assert all(any(c["client"] == "normal-client" for c in r["clients"]) for r in seen)


async def test_dashboard_streams_past_their_cap_get_503(inproc) -> None:
    server, url = await inproc.server(dashboard_max_streams="2")
    base = url.removesuffix("/mcp")
    async with client_of(url) as http, contextlib.AsyncExitStack() as streams:
        for _ in range(2):
            stream = await streams.enter_async_context(http.stream("GET", f"{base}/api/stream"))
            assert stream.status_code == 200
        with anyio.fail_after(10):  # a stream that is let in never ends
            refused = await http.get(f"{base}/api/stream")
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
        await server.await_line(r"\[dashboard\] 2 streams open .* refused with 503")
    # Closed streams free their places (counted down as the server sees them end).
    async with client_of(url) as http:
        with anyio.fail_after(10):
            while (await http.get(f"{base}/healthz")).json()["dashboard_streams"]:
                await anyio.sleep(0.05)
        async with http.stream("GET", f"{base}/api/stream") as again:
            assert again.status_code == 200


async def test_the_dashboard_shows_labels_never_session_ids(inproc) -> None:
    _, url = await inproc.server()
    raw = RawSession(url, "victim")
    try:
        await raw.initialize()
        await raw.request("resources/read", {"uri": STATUS_URI})
        async with client_of(url) as http:
            text = (await http.get(url.removesuffix("/mcp") + "/api/report")).text
    finally:
        await raw.close()
    assert raw.session_id is not None and raw.session_id not in text
    (victim,) = [c for c in json.loads(text)["clients"] if c["client"] == "victim"]
    label = victim["sessions"][0]["session"]
    assert re.fullmatch(r"[0-9a-f]{10}", label) and victim["best_session"] == label


async def test_a_dashboard_report_reads_a_bounded_window(inproc) -> None:
    _, url = await inproc.server(dashboard_max_events="100")
    raw = RawSession(url, "busy")
    try:
        await raw.initialize()
        for _ in range(150):
            await raw.request("ping")
        async with client_of(url) as http:
            data = (await http.get(url.removesuffix("/mcp") + "/api/report")).json()
    finally:
        await raw.close()
    assert "the newest 100 events" in data["window"]
    assert sum(len(s["events"]) for c in data["clients"] for s in c["sessions"]) <= 100


async def test_a_guessed_event_id_replays_nothing(inproc, redis_client) -> None:
    """Event ids a client resumes with are not stream entry ids (``<ms>-<seq>``, guessed
    in a few tries): whoever knows a session id still cannot replay what it was sent."""
    server, url = await inproc.server()
    victim = RawSession(url, "victim")
    try:
        await victim.initialize()
        await victim.request("resources/read", {"uri": STATUS_URI})
        assert victim.session_id is not None
        key = f"mcp:resume:{victim.session_id}"
        entries = [entry_id for entry_id, _ in redis_client.xrange(key)]
        assert entries, "nothing kept for resumption"
        headers = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": victim.session_id,
            "MCP-Protocol-Version": "2025-11-25",
        }
        async with client_of(url) as http:
            for guess in entries:  # what a guess of <ms>-<seq> finds
                mark = server.mark()
                with anyio.fail_after(10):
                    async with http.stream("GET", url, headers={**headers, "Last-Event-ID": guess}):
                        answer = await server.await_line(
                            r"\[resume\] (replay|malformed|session=.* is no longer kept)",
                            since=mark,
                        )
                assert "events=" not in answer or "events=0" in answer, answer
    finally:
        await victim.close()
