"""The evidence record and `mcp-lab report`, against real processes and real clients."""

from __future__ import annotations

import json
import urllib.request

import anyio
import pytest
import redis

from services import contract, state
from services.evidence import reader
from tests.lab import STATUS_URI, RawSession, amcp_lab, connect, lab_env

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


async def test_full_flow_scores_6_and_list_and_read_scores_3(lab, redis_url) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY)
    await lab.aupdater(update_delay_seconds=DELAY)
    async with connect(url, "full-flow") as client:
        await client.session.list_resources()
        await client.read_text()
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=float(DELAY) + BOUND)
        await client.read_text()
    async with connect(url, "reader") as client:
        await client.session.list_resources()
        await client.read_text()
    await server.await_line(r"\[session/end\] .*client=reader/")

    data = json.loads(await report(redis_url, "--format", "json"))
    full = client_entry(data, "full-flow")
    assert (full["level"], full["level_name"]) == (6, "re-read")
    checkpoints = full["sessions"][0]["checkpoints"]
    assert all(
        checkpoints[name]
        for name in ("connected", "discovered", "read_initial", "subscribed", "notified", "re_read")
    )
    assert checkpoints["connected"] < checkpoints["notified"] < checkpoints["re_read"]
    assert full["sessions"][0]["reread_delay_ms"] >= 0
    recorded = [e["method"] for e in full["sessions"][0]["events"]]
    # The GET stream's evidence (stream/open...) may come before the server has
    # handled notifications/initialized: the client opens it on the 202.
    assert "stream/open" in recorded
    methods = [m for m in recorded if not m.startswith("stream/")]
    assert methods[:2] == ["initialize", "notifications/initialized"]
    assert "notifications/resources/updated" in methods
    reader = client_entry(data, "reader")
    assert (reader["level"], reader["level_name"]) == (3, "read initial")
    assert any("never subscribed" in note for note in reader["notes"])

    markdown = await report(redis_url, "--format", "markdown")
    assert "## full-flow 1.0\n" in markdown and "## reader 1.0\n" in markdown
    full_block = markdown.split("## full-flow 1.0\n")[1].split("\n## ")[0]
    for line in (
        "- MCP connection: yes, 2025-11-25 over streamable-http (1 session)",
        "- Calls resources/list? yes (",
        "- Calls resources/read? yes, version 1 (",
        "- Calls resources/subscribe? yes (",
        "- Receives notifications/resources/updated? yes, on an open stream (",
        "- Re-reads after the update? yes, at the notified version or later (",
        "- Notes: level 6 (re-read)",
    ):
        assert line in full_block, full_block
    table = await report(redis_url)
    assert "full-flow/1.0" in table and "6 re-read" in table and "3 read initial" in table


async def test_notification_without_a_get_stream_is_recorded_as_dropped(lab, redis_url) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY)
    await lab.aupdater(update_delay_seconds=DELAY)
    raw = RawSession(url, "no-get-stream")
    try:
        await raw.initialize()
        await raw.request("resources/subscribe", {"uri": STATUS_URI})
        await server.await_line(
            r"\[notification/send\] .*client=no-get-stream/.*delivered=no",
            timeout=float(DELAY) + BOUND,
        )
        reply = await raw.request("resources/read", {"uri": STATUS_URI})
        assert "version: 2" in reply["result"]["contents"][0]["text"]
    finally:
        await raw.close()
    entry = client_entry(json.loads(await report(redis_url, "--format", "json")), "no-get-stream")
    assert entry["level"] == 4
    assert entry["sessions"][0]["dropped_notifications"] == 1
    assert any("dropped" in note for note in entry["notes"])


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


async def test_the_dashboard_stream_helpers_see_past_garbage(redis_url) -> None:
    decoding = state.connect(redis_url)  # decodes replies, as the server's client does
    raw = redis.Redis.from_url(redis_url)
    try:
        assert await reader.last_event_id(decoding) == "0-0"
        garbage = raw.xadd(contract.EVENTS_STREAM, {b"\xff": b"\xfe"}).decode()
        assert await reader.last_event_id(decoding) == garbage
        assert await reader.wait_for_events(decoding, "0-0", 100) == garbage
        assert await reader.wait_for_events(decoding, garbage, 50) is None
        assert await reader.read_events(decoding, "-") == []
    finally:
        raw.close()
        await decoding.aclose()


def key(entry_id: str) -> tuple[int, ...]:
    """A stream entry id, in the order Redis gives ids."""
    return tuple(int(part) for part in entry_id.split("-"))


async def test_a_run_parts_the_events_before_it_from_those_after_within_one_millisecond(
    redis_url,
) -> None:
    """Each stream numbers its own entries within a millisecond, so a run start
    written after an event of the same millisecond could get a smaller id than
    that event. An event of a later millisecond (a clock ahead) stands in for
    one recorded in the run start's own millisecond, later in its sequence."""
    decoding = state.connect(redis_url)
    raw = redis.Redis.from_url(redis_url)
    try:
        ahead = int(raw.time()[0]) * 1000 + 60_000
        before = raw.xadd(contract.EVENTS_STREAM, {b"x": b"1"}, id=f"{ahead}-7").decode()
        run_id = await reader.start_run(decoding)
        after = raw.xadd(contract.EVENTS_STREAM, {b"x": b"2"}).decode()
        assert key(before) < key(run_id) < key(after), (before, run_id, after)
        _, first, end = await reader.run_bounds(decoding, "0-0")
        assert end == f"({run_id}"
        earlier = raw.xrange(contract.EVENTS_STREAM, first, end)
        assert before in [entry_id.decode() for entry_id, _ in earlier]
        assert after not in [entry_id.decode() for entry_id, _ in earlier]
        # A second run at once, with no event between, still comes after the first.
        assert key(await reader.start_run(decoding)) > key(run_id)
    finally:
        raw.close()
        await decoding.aclose()
