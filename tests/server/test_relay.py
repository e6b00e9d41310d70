"""The relay: hand-typed publishes, garbage on the channel, several server replicas
(in-process servers, tests/support/inproc.py; real redis-cli and Redis)."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urlsplit

import anyio
import pytest

from mcp_lab import state
from mcp_lab.evidence import build, report
from mcp_lab.process.embedded_redis import redis_binary
from tests.support.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

CHANNEL = "mcp:resources:updated"
# Long enough that the subscribe's own update never comes during these tests.
NO_AUTO_UPDATE = "600"


async def redis_cli(redis_url: str, *args: str) -> str:
    """Run the real redis-cli binary against ``redis_url`` (without blocking the loop)."""
    parts = urlsplit(redis_url)
    db = parts.path.strip("/") or "0"
    command = [
        redis_binary("redis-cli"),
        "-h",
        parts.hostname or "127.0.0.1",
        "-p",
        str(parts.port or 6379),
        "-n",
        db,
        *args,
    ]
    with anyio.fail_after(10):
        result = await anyio.run_process(command, check=True)
    return result.stdout.decode().strip()


async def test_redis_cli_publish_of_a_bare_uri_is_relayed(inproc, redis_url) -> None:
    server, url = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "manual") as client:
        await client.session.subscribe_resource(STATUS_URI)
        receivers = await redis_cli(redis_url, "publish", CHANNEL, STATUS_URI)
        assert receivers == "1"  # the server's relay
        assert await client.wait_updated(1) == [STATUS_URI]
        await server.await_line(
            r"\[resource/update\] uri=test://review/status version=1 ", timeout=5
        )
        # A bare publish notifies without a version change.
        assert version_of(await client.read_text()) == 1


async def test_garbage_on_the_channel_is_ignored_and_the_relay_keeps_working(
    inproc, redis_url
) -> None:
    server, url = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "patient") as client:
        await client.session.subscribe_resource(STATUS_URI)
        garbage = [
            "{not json",
            '{"uri": 42}',
            "test://unknown/uri",
            '{"uri": "test://review/status", "version": "two"}',
            "",
        ]
        for payload in garbage:
            mark = server.mark()
            await redis_cli(redis_url, "publish", CHANNEL, payload)
            await server.await_line(r"\[relay\] ignored message: ", since=mark, timeout=5)
        await redis_cli(redis_url, "publish", CHANNEL, STATUS_URI)
        assert await client.wait_updated(1) == [STATUS_URI]
        assert len(server.matching(r"\[relay\] ignored message")) == len(garbage)


# The relay refuses payloads over 64 KB and logs at most a 120-character excerpt
# and a 200-character reason; a log line longer than this carries a payload.
LONGEST_LINE = 600


async def test_oversized_and_binary_payloads_get_one_short_line_each_and_the_relay_keeps_working(
    inproc, redis_client
) -> None:
    server, url = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "steadfast") as client:
        await client.session.subscribe_resource(STATUS_URI)
        ignored: list[tuple[bytes, str]] = [
            (b"x" * 5_000_000, r"payload of 5000000 bytes is over 65536"),
            (
                json.dumps({"uri": STATUS_URI, "pad": "y" * 5_000_000}).encode(),
                r"payload of \d+ bytes is over 65536",
            ),
            (bytes(range(256)) * 20_000, r"payload of 5120000 bytes is over 65536"),
            (b"\xff\xfe\x00binary\x80", r"payload is not UTF-8"),
            (f"test://{'a' * 60_000}".encode(), r"unknown uri 'test://aaa"),
        ]
        for payload, reason in ignored:
            mark = server.mark()
            assert redis_client.publish(CHANNEL, payload) == 1  # still subscribed
            line = await server.await_line(r"\[relay\] ignored message: ", since=mark, timeout=10)
            assert re.search(reason, line), line
            assert len(line) < LONGEST_LINE, f"{len(line)} characters: {line[:300]}"

        # Well formed, for a session id of 60 KB that no one here holds.
        mark = server.mark()
        named = json.dumps({"uri": STATUS_URI, "session": "s" * 60_000})
        assert redis_client.publish(CHANNEL, named) == 1
        line = await server.await_line(r"\[relay\] no subscribed session here ", since=mark)
        assert len(line) < LONGEST_LINE, f"{len(line)} characters: {line[:300]}"

        assert redis_client.publish(CHANNEL, STATUS_URI) == 1
        assert await client.wait_updated(1) == [STATUS_URI]
    assert len(server.matching(r"\[relay\] ignored message")) == len(ignored)
    # One subscription all along: no error dropped it.
    assert len(server.matching(r"\[relay\] subscribed ")) == 1
    assert server.matching(r"Traceback|\[relay\] (unexpected error|redis unavailable)") == []
    assert max(len(line) for line in server.lines) < LONGEST_LINE


async def test_json_message_for_one_session_reaches_only_that_session(inproc, redis_url) -> None:
    server, url = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "target") as a, connect(url, "other") as b:
        await a.session.subscribe_resource(STATUS_URI)
        await b.session.subscribe_resource(STATUS_URI)
        line = await server.await_line(r"\[initialize\] .*client=target/")
        session = line.split("session=")[1].split()[0]
        message = f'{{"uri":"{STATUS_URI}","session":"{session}","version":7}}'
        await redis_cli(redis_url, "publish", CHANNEL, message)
        assert await a.wait_updated(1) == [STATUS_URI]
        await server.await_line(r"\[notification/send\] .*client=target/", timeout=5)
        await b.session.send_ping()
        assert b.updated == []
        assert server.matching(r"\[notification/send\] .*client=other/") == []


async def test_a_batch_message_notifies_each_named_session_and_records_when_it_was_due(
    inproc, redis_url
) -> None:
    """The updater's batch form: each named session here is notified once, with its
    own version; the evidence keeps each notification's due time, and the report
    says the lab was late when it was (a due time 5 s in the past)."""
    server, url = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "first") as a, connect(url, "second") as b, connect(url, "idle") as c:
        await a.session.subscribe_resource(STATUS_URI)
        await b.session.subscribe_resource(STATUS_URI)
        await c.session.subscribe_resource(STATUS_URI)
        ids = {}
        for name in ("first", "second"):
            line = await server.await_line(rf"\[initialize\] .*client={name}/")
            ids[name] = line.split("session=")[1].split()[0]
        now_ms = int(time.time() * 1000)
        batch = {
            "uri": STATUS_URI,
            "sessions": [
                [ids["first"], 3, now_ms],
                [ids["second"], 4, now_ms - 5000],
                ["not-here", 2, now_ms],
            ],
        }
        await redis_cli(redis_url, "publish", CHANNEL, json.dumps(batch))
        assert await a.wait_updated(1) == [STATUS_URI]
        assert await b.wait_updated(1) == [STATUS_URI]
        await server.await_line(r"\[resource/update\] uri=\S+ version=4 .*client=second/")
        await c.session.send_ping()
        assert c.updated == []
        assert server.matching(r"\[resource/update\] uri=\S+ version=3 .*client=first/")
    await server.await_line(r"\[session/end\] .*client=idle/")
    # What `mcp-lab report` prints, from the same report builder, in process.
    redis = state.connect(redis_url)
    try:
        made = await build.build(redis)
    finally:
        await redis.aclose()
    data = report.to_json(made)
    timing = data["lab_timing"]
    assert timing["notifications"] == 2 and timing["late"] == 1 and timing["was_late"]
    assert 5000 <= timing["max_ms"] < 15000
    second = next(c for c in data["clients"] if c["client"] == "second")
    assert any(n.startswith("the lab sent a notification 5.") for n in second["notes"])
    sent = [e for e in second["sessions"][0]["events"] if e["method"].endswith("/updated")]
    assert sent[0]["due"] is not None and sent[0]["lab_late_ms"] >= 5000
    first = next(c for c in data["clients"] if c["client"] == "first")
    assert not any("after it was due" in n for n in first["notes"])
    table = report.to_table(made)
    assert "note: the lab was late: 1 of 2 notification(s)" in table, table


async def test_one_publish_reaches_subscribed_sessions_on_two_replicas(inproc, redis_url) -> None:
    one, url_one = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    two, url_two = await inproc.server(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url_one, "on-one") as a, connect(url_two, "on-two") as b:
        await a.session.subscribe_resource(STATUS_URI)
        await b.session.subscribe_resource(STATUS_URI)
        assert await redis_cli(redis_url, "publish", CHANNEL, STATUS_URI) == "2"
        assert await a.wait_updated(1) == [STATUS_URI]
        assert await b.wait_updated(1) == [STATUS_URI]
        await one.await_line(r"\[notification/send\] .*client=on-one/", timeout=5)
        await two.await_line(r"\[notification/send\] .*client=on-two/", timeout=5)


async def test_updater_job_for_a_session_on_another_replica_reaches_it(inproc) -> None:
    _, url_one = await inproc.server(update_delay_seconds="0.3")
    _, url_two = await inproc.server(update_delay_seconds="0.3")
    await inproc.updater(update_delay_seconds="0.3")
    async with connect(url_one, "bystander") as a, connect(url_two, "subscriber") as b:
        await b.session.subscribe_resource(STATUS_URI)
        assert await b.wait_updated(1) == [STATUS_URI]
        assert version_of(await b.read_text()) == 2
        await a.session.send_ping()
        assert a.updated == []


async def test_a_session_with_hundreds_of_updates_waiting_does_not_hold_another_back(
    inproc,
) -> None:
    """Fair delivery: 500 updates of one session arrive before another session's one;
    that one goes out in the first round, not after the 500 (it went last before)."""
    server, url = await inproc.server(
        scenario="template",
        update_delay_seconds=NO_AUTO_UPDATE,
        max_subscriptions_per_session="100",
    )
    flood_uris = [f"test://review/flood-{at}" for at in range(50)]
    async with connect(url, "flooder") as flooder, connect(url, "victim") as victim:
        for uri in flood_uris:
            await flooder.session.subscribe_resource(uri)
        await victim.session.subscribe_resource("test://review/victim")
        ids = {}
        for name in ("flooder", "victim"):
            line = await server.await_line(rf"\[initialize\] .*client={name}/")
            ids[name] = line.split("session=")[1].split()[0]
        payloads: list[bytes | str] = [
            json.dumps({"uri": uri, "session": ids["flooder"], "version": version})
            for version in range(2, 12)
            for uri in flood_uris
        ]
        payloads.append(
            json.dumps({"uri": "test://review/victim", "session": ids["victim"], "version": 2})
        )
        mark = server.mark()
        await server.run_here(server.lab.relay.handle_many(payloads))
        assert await victim.wait_updated(1) == ["test://review/victim"]
        sent = server.matching(r"\[notification/send\] ", since=mark)
        assert len(sent) == 501
        first_victim = next(at for at, line in enumerate(sent) if "client=victim/" in line)
        assert first_victim <= 1, sent[:3]
