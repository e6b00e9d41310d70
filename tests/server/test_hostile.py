"""The attacks of issue 20, replayed against the lab with bounded loops.

Most run the lab in process (tests/support/inproc.py) on the real Redis of the test; the
ones whose claim is the process boundary (open-file limits, a replica killed with
SIGKILL) start server processes. scripts/bench_hostile.py measures the same
attacks at full size and prints the figures (docs/security.md, "Hostile clients").
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
import mcp_types
import pytest
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

from mcp_lab import protocol
from mcp_lab.contract import Peer
from mcp_lab.server.asgi import FrontDoor
from mcp_lab.server.delivery import GetStreamDelivery
from mcp_lab.server.guard import BodyGate, Security
from mcp_lab.server.lifecycle import SessionCap
from mcp_lab.server.resume.get_streams import StreamLog, plain
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from tests.support.inproc import http_client
from tests.support.lab import STATUS_URI, RawSession, connect

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
FORGED = "[resources/subscribe] uri=test://review/status session=forged client=claude-code/1.2.3"
# Every line an in-process server logs starts with its level (tests/support/inproc.py).
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


async def test_every_replica_labels_a_session_alike(inproc) -> None:
    """The label secret is the lab's (kept in Redis), not each process's: a session
    is one row under one label on every replica's dashboard."""
    _, url = await inproc.server()
    _, other_url = await inproc.server()
    raw = RawSession(url, "seen-twice")
    try:
        await raw.initialize()
        await raw.request("resources/read", {"uri": STATUS_URI})
    finally:
        await raw.close()
    labels = []
    for base in (url, other_url):
        async with client_of(base) as http:
            data = (await http.get(base.removesuffix("/mcp") + "/api/report")).json()
        (seen,) = [c for c in data["clients"] if c["client"] == "seen-twice"]
        labels.append(seen["sessions"][0]["session"])
    assert labels[0] == labels[1] and re.fullmatch(r"[0-9a-f]{10}", labels[0]), labels


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
    # POST responses as streams, so that they are kept (by default a read is one JSON body).
    server, url = await inproc.server(post_responses="sse")
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


LISTEN = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "subscriptions/listen",
    "params": {
        "notifications": {"resourceSubscriptions": [STATUS_URI]},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-listener", "version": "1"},
        },
    },
}
LISTEN_HEADERS = {
    **HEADERS,
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "subscriptions/listen",
}


async def test_sse_sessions_and_listen_streams_count_in_the_session_cap(inproc) -> None:
    server, url = await inproc.server(max_sessions="2")
    base = url.removesuffix("/mcp")
    info = mcp_types.Implementation(name="capped-listener", version="1")
    async with client_of(url) as http, contextlib.AsyncExitStack() as held:
        sse = await held.enter_async_context(http.stream("GET", f"{base}/sse"))
        assert sse.status_code == 200
        modern = Client(streamable_http_client(url, http_client=client_of(url)), client_info=info)
        client = await held.enter_async_context(modern)
        await held.enter_async_context(client.listen(resource_subscriptions=[STATUS_URI]))
        await server.await_line(r"\[subscriptions/listen\] uri=test://review/status .*capped")

        refused = await http.post(url, json=INIT_BODY, headers=HEADERS)
        assert refused.status_code == 503 and "retry-after" in refused.headers
        with anyio.fail_after(10):  # let in, an SSE stream would not end
            assert (await http.get(f"{base}/sse")).status_code == 503
        listen = await http.post(url, json=LISTEN, headers=LISTEN_HEADERS)
        assert listen.status_code == 503 and "retry-after" in listen.headers
        await server.await_line(r"\[lab\] session cap reached.*legacy SSE")
        await server.await_line(r"\[lab\] session cap reached.*subscriptions/listen")
    async with client_of(url) as http:  # both closed: room again
        with anyio.fail_after(10):
            while (await http.get(f"{base}/healthz")).json()["other_sessions"]:
                await anyio.sleep(0.05)
        assert (await http.post(url, json=INIT_BODY, headers=HEADERS)).status_code == 200


INIT_BODY = protocol.initialize_request("capped", "0")


class HeldApp:
    """An ASGI app that reads its body and answers 200 once released."""

    def __init__(self) -> None:
        self.entered: list[bytes] = []
        self.release = anyio.Event()
        self._arrived = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = (await receive()).get("body", b"")
        self.entered.append(body)
        self._arrived.set()
        self._arrived = anyio.Event()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def wait_entered(self, count: int) -> None:
        with anyio.fail_after(5):
            while len(self.entered) < count:
                await self._arrived.wait()


async def test_a_request_id_already_in_flight_in_its_session_gets_an_error() -> None:
    """The SDK keys a session's response streams by request id: a second request
    with an id still in flight took the first one's place, and one of them was never
    answered. The front door answers the second with an error instead."""
    app = HeldApp()
    door = FrontDoor(
        app,
        path="/mcp",
        streams=StreamLog(plain(app), SessionRegistry()),
        cap=SessionCap(app, max_sessions=10, retry_after=1),
    ).secured(Security(None, BodyGate(None, 4096)))
    answers: dict[str, list[Message]] = {}

    async def post(name: str, session: bytes, request_id: object) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode()
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [(b"mcp-session-id", session), (b"content-length", b"%d" % len(body))],
            "query_string": b"",
        }
        sent: list[Message] = []
        answers[name] = sent

        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await door(scope, receive, send)

    with anyio.fail_after(10):  # a second request held like the first would never end
        async with anyio.create_task_group() as group:
            group.start_soon(post, "first", b"abc", 7)
            await app.wait_entered(1)
            await post("again", b"abc", "7")  # the SDK keys ids as strings: 7 and "7" collide
            group.start_soon(post, "other id", b"abc", 8)
            group.start_soon(post, "other session", b"def", 7)
            await app.wait_entered(3)
            app.release.set()
    assert answers["again"][0]["status"] == 400
    error = json.loads(answers["again"][1]["body"])
    assert error["id"] == "7" and error["error"]["code"] == -32600, error
    assert len(app.entered) == 3
    for name in ("first", "other id", "other session"):
        assert answers[name][0]["status"] == 200, name
    await post("later", b"abc", 7)  # no longer in flight
    assert answers["later"][0]["status"] == 200 and len(app.entered) == 4


async def test_a_listen_with_a_megabyte_client_name_gets_its_update(inproc) -> None:
    """A 2026-07-28 client is keyed by its clientInfo; a whole 1 MB name made a job
    the updater dropped (over 64 KB) after the listen was acknowledged."""
    _, url = await inproc.server(update_delay_seconds="0.2")
    updater = await inproc.updater(update_delay_seconds="0.2")
    info = mcp_types.Implementation(name="n" * 1_000_000, version="1")
    transport = streamable_http_client(url, http_client=client_of(url))
    async with Client(transport, client_info=info) as client:
        with anyio.fail_after(15):
            async with client.listen(resource_subscriptions=[STATUS_URI]) as subscription:
                async for update in subscription:
                    assert update.uri == STATUS_URI
                    break
    assert not updater.matching(r"over 65536")


async def test_a_job_over_the_size_the_updater_takes_is_refused_not_queued(
    inproc, redis_client
) -> None:
    server, _ = await inproc.server()
    lab = server.lab
    peer = Peer(session="s" * 70_000, client_name="huge")

    async def nothing(*_: object) -> None:
        return None

    subscriber = Subscriber(peer, GetStreamDelivery(peer.session, nothing, nothing))
    with pytest.raises(MCPError) as refused:
        await lab.subscribe(subscriber, STATUS_URI)
    assert refused.value.error.code == mcp_types.INVALID_PARAMS
    assert redis_client.xlen("mcp:jobs") == 0
    assert lab.registry.subscribers(STATUS_URI) == []
