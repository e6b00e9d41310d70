"""Sessions left open and server processes: the cap (503), idle expiry, a killed
replica's subscribers, the open-file limit at start, and a stopping server's GET streams."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
import redis

from mcp_lab import contract, protocol
from mcp_lab.process.embedded_redis import free_port
from tests.support.lab import (
    STATUS_URI,
    LabProcess,
    RawSession,
    amcp_lab,
    connect,
    lab_env,
    version_of,
)

pytestmark = pytest.mark.anyio


async def test_sessions_past_the_cap_get_503_and_earlier_ones_keep_working(lab) -> None:
    server, url = await lab.aserver(max_sessions="5")
    sessions = [await open_session(url, f"capped-{i}") for i in range(5)]
    try:
        mark = server.mark()
        refused = RawSession(url, "one-too-many")
        status, reply = await refused.post(protocol.initialize_request("one-too-many"))
        assert status == 503, reply
        assert refused.session_id is None
        async with httpx2.AsyncClient(timeout=10) as http:
            raw = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                headers={"Accept": "application/json, text/event-stream"},
            )
            assert raw.status_code == 503
            assert raw.headers["retry-after"].isdigit()
            health = (await http.get(url.removesuffix("/mcp") + "/healthz")).json()
        assert health["http_sessions"] == 5
        assert health["max_sessions"] == 5
        await server.await_line(r"\[lab\] session cap reached: 5 of 5 .* 503", since=mark)
        await refused.close()

        for session in sessions:
            assert await read_version(session) == 1

        # A session that ends makes room for a new one.
        async with httpx2.AsyncClient(timeout=10) as http:
            ended = await http.delete(url, headers=sessions[0]._headers())
        assert ended.status_code == 200
        await server.await_line(rf"\[session/end\] closed session={sessions[0].session_id}")
        sessions[0] = await open_session(url, "after-room-freed")
        assert await read_version(sessions[0]) == 1
    finally:
        for session in sessions:
            await session.close()


async def test_abandoned_sessions_are_closed_after_the_idle_time(
    lab, redis_client: redis.Redis
) -> None:
    # POST responses as streams, so that a session without a GET stream has resume
    # events to clean up too (by default its answers are JSON bodies, never kept).
    server, url = await lab.aserver(session_idle_seconds="1.5", post_responses="sse")
    listening = await open_session(url, "keeps-a-get-stream", subscribe=True)
    async with open_get_stream(url, listening.session_id or "") as _stream:
        abandoned = await open_session(url, "walks-away", subscribe=True)
        gone = abandoned.session_id
        assert gone
        assert redis_client.sismember(SUBSCRIBERS, gone)
        assert redis_client.exists(contract.resume_key(gone))
        assert redis_client.exists(contract.session_owner_key(gone))

        await server.await_line(rf"\[session/end\] idle for 1.5 s session={gone}", timeout=20)
        status, reply = await abandoned.post({"jsonrpc": "2.0", "id": 9, "method": "ping"})
        assert status == 404, reply
        assert not redis_client.sismember(SUBSCRIBERS, gone)
        assert not redis_client.exists(contract.resume_key(gone))
        assert not redis_client.exists(contract.session_owner_key(gone))
        ends = [e for e in session_events(redis_client, gone) if e["method"] == "session/end"]
        assert [(e["direction"], e.get("reason")) for e in ends] == [("out", "idle")]
        await abandoned.close()

        # One more idle period passes (another abandoned session expires after
        # it): the session whose GET stream is open is still there.
        later = await open_session(url, "walks-away-later")
        await server.await_line(rf"\[session/end\] idle .* session={later.session_id}", timeout=20)
        await later.close()
        assert await read_version(listening) == 1
        assert redis_client.sismember(SUBSCRIBERS, listening.session_id or "")

    # Its stream closed, it is idle like any other.
    await server.await_line(rf"\[session/end\] idle .* session={listening.session_id}", timeout=20)
    assert not redis_client.sismember(SUBSCRIBERS, listening.session_id or "")
    await listening.close()
    async with httpx2.AsyncClient(timeout=10) as http:
        health = (await http.get(url.removesuffix("/mcp") + "/healthz")).json()
    assert (health["sessions"], health["http_sessions"]) == (0, 0)

    report = await amcp_lab(lab_env(lab.redis_url), "report", "--format", "json")
    assert report.returncode == 0, report.stderr
    clients = {c["client"]: c for c in json.loads(report.stdout)["clients"]}
    notes = clients["walks-away"]["sessions"][0]["notes"]
    assert any("never closed its session" in note for note in notes), notes


async def test_subscribers_of_a_killed_replica_are_dropped(lab, redis_client: redis.Redis) -> None:
    first, first_url = await lab.aserver()
    orphan = await open_session(first_url, "orphaned", subscribe=True)
    await orphan.close()
    orphan_id = orphan.session_id or ""
    assert redis_client.sismember(SUBSCRIBERS, orphan_id)
    # As if it had also subscribed to a template's resource, whose URI it chose.
    chosen = contract.subscribers_key("test://review/chosen-by-the-client")
    redis_client.sadd(chosen, orphan_id)
    first.kill()
    redis_client.sadd(SUBSCRIBERS, GHOST)

    second, second_url = await lab.aserver()
    await second.await_line(r"\[lab\] 1 subscriber\(s\) .* belong to no replica .*: ghost-of")
    survivor = await open_session(second_url, "survivor", subscribe=True)
    try:
        line = await second.await_line(
            r"\[lab\] replica \w+ is gone .* dropped its 1 subscribed session", timeout=40
        )
        assert orphan_id in line
        assert not redis_client.sismember(SUBSCRIBERS, orphan_id)
        assert not redis_client.exists(chosen)
        assert not redis_client.exists(contract.resume_key(orphan_id))
        assert redis_client.smembers(SUBSCRIBERS) == {survivor.session_id, GHOST}
        assert await read_version(survivor) == 1
    finally:
        await survivor.close()


@pytest.mark.process
def test_the_server_raises_its_open_file_limit_to_what_the_cap_needs(redis_url) -> None:
    server = _server_with_open_files(redis_url, soft=300, hard="$(ulimit -Hn)")
    try:
        assert _soft_open_files(server.process.pid) >= 1000 * 2
        assert not server.matching(r"open-file limit")
    finally:
        server.stop()


@pytest.mark.process
def test_a_cap_the_open_file_limit_cannot_hold_is_named_at_start(redis_url) -> None:
    server = _server_with_open_files(redis_url, soft=300, hard=300)
    try:
        assert server.matching(
            r"WARNING .*open-file limit 300 holds about 118 sessions, fewer than "
            r"MCP_TEST_MAX_SESSIONS=1000"
        )
    finally:
        server.stop()


@pytest.mark.process
def test_with_the_default_cap_a_short_open_file_limit_is_a_debug_line(
    redis_url,
) -> None:
    """A lab for a few clients never nears 10,000 sessions: the shortfall is said at
    DEBUG, not as the first line someone testing one client reads."""
    server = _server_with_open_files(redis_url, soft=300, hard=300, cap=None)
    try:
        assert not server.matching(r"open-file limit"), server.lines
    finally:
        server.stop()


async def test_a_stopping_server_ends_its_open_get_streams_at_once(lab) -> None:
    server, url = await lab.aserver(update_delay_seconds="600")
    async with connect(url, "held") as client:
        await client.read_text()
        await server.await_line(r"\[stream/open\] GET .*client=held/")
        mark = server.mark()
        server.process.send_signal(signal.SIGINT)
        await server.await_line(r"\[stream/close\] GET .*client=held/", since=mark)
    # One SIGINT only (a second one makes uvicorn cut its shutdown short).
    assert await anyio.to_thread.run_sync(lambda: server.process.wait(timeout=10)) == 0
    # uvicorn cancels what still runs after its graceful timeout, and says so.
    assert server.matching(r"graceful shutdown exceeded|Traceback|ERROR") == [], server.lines


SUBSCRIBERS = contract.subscribers_key(STATUS_URI)


GHOST = "ghost-of-an-older-server"


async def open_session(url: str, name: str, subscribe: bool = False) -> RawSession:
    """An initialized raw session (no GET stream), subscribed when asked."""
    session = RawSession(url, name)
    await session.initialize()
    if subscribe:
        reply = await session.request("resources/subscribe", {"uri": STATUS_URI})
        assert "result" in reply, reply
    return session


async def read_version(session: RawSession) -> int:
    reply = await session.request("resources/read", {"uri": STATUS_URI})
    return version_of(reply["result"]["contents"][0]["text"])


@asynccontextmanager
async def open_get_stream(url: str, session: str) -> AsyncIterator[httpx2.Response]:
    """The standalone GET stream of ``session``, open while the block runs."""
    headers = {
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
    }
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=60)) as http:
        async with http.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200
            yield response


def session_events(redis_client: redis.Redis, session: str) -> list[dict[str, str]]:
    return [f for _, f in redis_client.xrange(contract.EVENTS_STREAM) if f["session"] == session]


def _server_with_open_files(
    redis_url: str, soft: int, hard: int | str, cap: str | None = "1000"
) -> LabProcess:
    """``mcp-lab server`` (cap 1,000 sessions, or the default with ``cap=None``) started
    under these open-file limits."""
    port = free_port()
    env = lab_env(redis_url, port=str(port), **({} if cap is None else {"max_sessions": cap}))
    limits = f"ulimit -Sn {soft} && ulimit -Hn {hard}"
    command = ["sh", "-c", f'{limits} && exec "$0" -m mcp_lab server', sys.executable]
    server = LabProcess(f"server:{port}", command, env)
    server.wait_for(r"\[lab\] server ready .*relay=subscribed", timeout=30)
    return server


def _soft_open_files(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")
