"""The evidence record and `mcp-lab report`, against real processes and real clients."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types
import pytest
import redis
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage

from mcp_lab import contract, protocol, state
from mcp_lab.evidence import reader
from tests.support.lab import RawSession, amcp_lab, connect, lab_env, stdio_server

pytestmark = pytest.mark.anyio

DELAY = "0.5"
BOUND = 10.0


async def report(redis_url: str, *args: str) -> str:
    result = await amcp_lab(lab_env(redis_url), "report", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def reset(redis_url: str) -> None:
    result = await amcp_lab(lab_env(redis_url), "reset")
    assert result.returncode == 0, result.stderr


def client_entry(data: dict, name: str) -> dict:
    matches = [c for c in data["clients"] if c["client"] == name]
    assert len(matches) == 1, data["clients"]
    return matches[0]


async def test_every_inbound_message_is_recorded_with_its_error(lab, redis_url) -> None:
    _, url = await lab.aserver()
    raw = RawSession(url, "odd-client")
    try:
        await raw.initialize()
        unknown = await raw.request("no/such/method")
        assert unknown["error"]["code"] == -32601
        missing = await raw.request("resources/read", {"uri": "test://missing"})
        assert missing["error"]["code"] == -32002
    finally:
        await raw.close()
    entry = client_entry(json.loads(await report(redis_url, "--format", "json")), "odd-client")
    events = [(e["method"], e["error"]) for e in entry["sessions"][0]["events"]]
    assert events == [
        ("initialize", None),
        ("notifications/initialized", None),
        ("no/such/method", -32601),
        ("resources/read", -32002),
    ]
    assert entry["level"] == 1


async def test_reset_starts_a_new_run_and_old_runs_stay_readable(lab, redis_url) -> None:
    _, url = await lab.aserver()
    async with connect(url, "before-reset") as client:
        await client.read_text()
    await reset(redis_url)
    async with connect(url, "after-reset") as client:
        await client.session.list_resources()
    data = json.loads(await report(redis_url, "--format", "json"))
    assert [c["client"] for c in data["clients"]] == ["after-reset"]
    assert data["run"]["id"] != "0-0" and data["run"]["started"]
    everything = json.loads(await report(redis_url, "--format", "json", "--run", "0-0"))
    assert [c["client"] for c in everything["clients"]] == ["before-reset"]
    recent = json.loads(await report(redis_url, "--format", "json", "--since", "1h"))
    assert {c["client"] for c in recent["clients"]} == {"before-reset", "after-reset"}
    # each header says what it covers: the run, everything before a reset, or the --since window
    assert recent["run"] is None and recent["since"].endswith("Z")
    assert (await report(redis_url)).startswith(f"run {data['run']['id']}, started 20")
    assert (await report(redis_url, "--run", "0-0")).startswith(
        "run 0-0, from the first event recorded"
    )
    assert (await report(redis_url, "--since", "1h")).startswith(
        f"events since {recent['since'][:10]} "
    )
    since_md = await report(redis_url, "--since", "1h", "--format", "markdown")
    assert since_md.startswith("<!-- mcp-subscribe-lab events since ") and "0-0" not in since_md


# Entries anyone with redis-cli could add to the lab's own streams; none is evidence.
GARBAGE_EVENTS: list[dict[bytes, bytes]] = [
    {b"ts": b"\xff\xfe", b"session": b"s", b"client": b"c"},  # not UTF-8
    {b"\x80" * 5000: b"x"},  # a field name that is not UTF-8, and long
    {b"hello": b"world"},  # no event at all
    {b"ts": b"9" * 30, b"session": b"x", b"client": b"y", b"client_version": b"1",
     b"protocol": b"p", b"transport": b"t", b"direction": b"in", b"method": b"initialize"},
    {b"ts": b"1", b"session": b"x", b"client": b"y", b"client_version": b"1",
     b"protocol": b"p", b"transport": b"t", b"direction": b"sideways", b"method": b"initialize"},
    {b"version": b"\xc3" * 2_000_000},  # megabytes, cut UTF-8
]  # fmt: skip


def write_garbage(redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url)  # bytes in, as a hostile writer sends them
    try:
        for fields in GARBAGE_EVENTS:
            raw.xadd(contract.EVENTS_STREAM, fields)
        raw.xadd(contract.RUNS_STREAM, {b"\xff": b"\xfe"})  # a run start, with garbage
    finally:
        raw.close()


async def test_garbage_in_the_record_is_left_out_of_report_and_dashboard(lab, redis_url) -> None:
    server, url = await lab.aserver()
    async with connect(url, "before-garbage") as client:
        await client.read_text()
    write_garbage(redis_url)
    async with connect(url, "after-garbage") as client:
        await client.read_text()
    await server.await_line(r"\[session/end\] .*client=after-garbage/")

    # The garbage run start began a run: the garbage events are in the one before.
    for fmt in ("json", "markdown", "table"):
        result = await amcp_lab(lab_env(redis_url), "report", "--format", fmt, "--run", "0-0")
        assert result.returncode == 0, result.stderr
        assert "before-garbage" in result.stdout and "after-garbage" not in result.stdout
        which, warning = result.stderr.strip().split("\n")
        assert which.startswith("mcp-lab: Redis at ") and "(REDIS_URL)" in which, which
        assert warning.startswith(
            f"[evidence] left out {len(GARBAGE_EVENTS)} malformed entries of mcp:events; first "
        ), warning
        assert "field 'ts' is not UTF-8" in warning and len(warning) < 800, warning
    result = await amcp_lab(lab_env(redis_url), "report", "--format", "json")
    assert result.returncode == 0 and "left out" not in result.stderr, result.stderr
    assert [c["client"] for c in json.loads(result.stdout)["clients"]] == ["after-garbage"]

    base = url.removesuffix("/mcp")
    with urllib.request.urlopen(f"{base}/api/report", timeout=BOUND) as reply:
        assert [c["client"] for c in json.load(reply)["clients"]] == ["after-garbage"]
    first = await anyio.to_thread.run_sync(lambda: first_stream_report(f"{base}/api/stream"))
    assert [c["client"] for c in first["clients"]] == ["after-garbage"]
    assert server.matching(r"Traceback|Exception") == [], "\n".join(server.lines)


def first_stream_report(url: str) -> dict:
    """The first report the dashboard's event stream sends."""
    with urllib.request.urlopen(url, timeout=BOUND) as stream:
        for raw in stream:
            line = raw.decode()
            if line.startswith("data: "):
                return json.loads(line[6:])
    raise AssertionError("the stream ended before a report")


async def test_the_next_server_playing_another_scenario_begins_a_run(lab, redis_url) -> None:
    """Issue 33: a run played under `repeated` was reported as `single` after the next
    `up`. The run remembers its scenario; a server that plays another one begins a run
    of its own (and says so), and the old run is still scored in `repeated`."""
    first, url = await lab.aserver(scenario="repeated")
    await reset(redis_url)
    played = json.loads(await report(redis_url, "--format", "json"))["run"]["id"]
    async with connect(url, "under-repeated") as client:
        await client.read_text()
    await first.await_line(r"\[session/end\] .*client=under-repeated/")
    await anyio.to_thread.run_sync(first.stop)

    second, _ = await lab.aserver(scenario="single")
    line = second.matching(r"\[evidence\] new observation run ")
    assert len(line) == 1 and "the lab now plays single (the last run played repeated)" in line[0]
    now = json.loads(await report(redis_url, "--format", "json"))
    assert now["run"]["id"] != played and now["scenario"]["name"] == "single"
    assert now["clients"] == []
    old = json.loads(await report(redis_url, "--format", "json", "--run", played))
    assert old["scenario"]["name"] == "repeated"
    entry = client_entry(old, "under-repeated")
    assert [c["key"] for c in entry["checks"]] == ["notified_each", "re_read_each"]
    # A server of the same scenario begins no run.
    third, _ = await lab.aserver(scenario="single")
    assert third.matching(r"new observation run") == []
    again = json.loads(await report(redis_url, "--format", "json"))
    assert again["run"]["id"] == now["run"]["id"]


async def recorded(redis_url: str, method: str, count: int) -> None:
    """Wait (bounded) until ``count`` events of ``method`` are in ``mcp:events``."""
    client = state.connect(redis_url)
    try:
        with anyio.fail_after(BOUND):
            last = "0-0"
            while (
                len([e for e in await reader.read_events(client, "-") if e.method == method])
                < count
            ):
                last = await reader.wait_for_events(client, last, 500) or last
    finally:
        await client.aclose()


CANCELLED = "notifications/cancelled"


def cancelled(request_id: int) -> mcp_types.CancelledNotification:
    params = mcp_types.CancelledNotificationParams(request_id=request_id, reason="shutdown")
    return mcp_types.CancelledNotification(params=params)


async def test_a_nameless_notification_over_stdio_is_no_client_of_its_own(lab, redis_url) -> None:
    """Issue 33: over stdio, a 2026-07-28 client's notifications/cancelled carries no
    clientInfo (Copilot 1.0.102 at shutdown), and made a client `unknown/?` at level 0.
    It is the connection's client's; one sent before any named request cannot be
    told whose it is, and is counted as a message without a client's identity."""
    env = lab_env(redis_url)
    info = mcp_types.Implementation(name="stdio-canceller", version="1.0.102")
    with tempfile.TemporaryFile("w+") as errlog:

        @asynccontextmanager
        async def cancel_first() -> AsyncIterator[Any]:
            """stdio to the lab, with a notification written before the first request."""
            async with stdio_client(stdio_server(env), errlog=errlog) as (read, write):
                note = cancelled(0).model_dump(by_alias=True, mode="json", exclude_none=True)
                await write.send(
                    SessionMessage(mcp_types.JSONRPCNotification(jsonrpc="2.0", **note))
                )
                yield read, write

        async with Client(cancel_first(), client_info=info) as client:
            assert client.protocol_version == protocol.MODERN
            await client.list_resources()
            await client.session.send_notification(cancelled(99))
            await recorded(redis_url, CANCELLED, 2)
    data = json.loads(await report(redis_url, "--format", "json"))
    assert [(c["client"], c["version"]) for c in data["clients"]] == [
        ("stdio-canceller", "1.0.102")
    ]
    methods = [e["method"] for e in data["clients"][0]["sessions"][0]["events"]]
    assert methods.count(CANCELLED) == 1 and methods[-1] == CANCELLED
    assert data["left_out"]["without_identity"] == {CANCELLED: 1}
    table = await report(redis_url)
    assert "unknown/?" not in table
    assert "note: 1 message without a client's identity" in table and CANCELLED in table
