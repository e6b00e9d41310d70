"""The evidence record on in-process servers (tests/support/inproc.py): what a session did
is scored from Redis and served by the server's own /api/report. test_evidence.py
checks the same through `mcp-lab report` against server processes."""

from __future__ import annotations

import anyio
import pytest

from mcp_lab import contract, protocol, state
from mcp_lab.evidence import build, reader, report
from tests.support.inproc import api_report, client_entry
from tests.support.lab import STATUS_URI, RawSession, connect

pytestmark = pytest.mark.anyio

DELAY = "0.3"
BOUND = 10.0


async def test_full_flow_scores_6_and_list_and_read_scores_3(inproc, redis_url) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)
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

    data = await api_report(url)
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
    # The GET stream's evidence (stream/open...) may come before notifications/initialized.
    assert "stream/open" in recorded
    methods = [m for m in recorded if not m.startswith("stream/")]
    assert methods[:2] == ["initialize", "notifications/initialized"]
    assert "notifications/resources/updated" in methods
    reader = client_entry(data, "reader")
    assert (reader["level"], reader["level_name"]) == (3, "read initial")
    assert any("never subscribed" in note for note in reader["notes"])

    # What `mcp-lab report` prints, from the same report builder.
    redis = state.connect(redis_url)
    try:
        made = await build.build(redis)
    finally:
        await redis.aclose()
    markdown = report.to_markdown(made)
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
    table = report.to_table(made)
    assert "full-flow/1.0" in table and "6 re-read" in table and "3 read initial" in table


async def test_notification_without_a_get_stream_is_recorded_as_dropped(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)
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
    entry = client_entry(await api_report(url), "no-get-stream")
    assert entry["level"] == 4
    assert entry["sessions"][0]["dropped_notifications"] == 1
    assert any("dropped" in note for note in entry["notes"])


async def recorded(redis_url: str, method: str, count: int = 1) -> list[contract.Event]:
    """Wait (bounded) until ``count`` events of ``method`` are in ``mcp:events``."""
    redis = state.connect(redis_url)
    try:
        with anyio.fail_after(BOUND):
            last = "0-0"
            while True:
                events = [e for e in await reader.read_events(redis, "-") if e.method == method]
                if len(events) >= count:
                    return events
                last = await reader.wait_for_events(redis, last, 500) or last
    finally:
        await redis.aclose()


async def test_a_client_connected_before_a_reset_is_no_client_of_the_new_run(
    inproc, redis_url
) -> None:
    """Issue 33: after `mcp-lab reset`, a session of the run before ends; its end is
    all the new run holds of it. It is no "0 no connection" row of the new run: the
    report leaves it out and says so."""
    server, url = await inproc.server()
    redis = state.connect(redis_url)
    try:
        async with connect(url, "before-reset") as client:
            await client.read_text()
            run_id = await reader.start_run(redis)  # what `mcp-lab reset` does
        await server.await_line(r"\[session/end\] .*client=before-reset/")
        await recorded(redis_url, protocol.STREAM_CLOSE)
        made = await build.build(redis)
        earlier = await build.build(redis, run="0-0")
    finally:
        await redis.aclose()
    assert made.run_id == run_id
    assert made.clients == []
    left = [(s.client, [e.method for e in s.events]) for s in made.left_out.began_earlier]
    assert left and {name for name, _ in left} == {"before-reset"}
    assert all(m in {protocol.STREAM_CLOSE, protocol.SESSION_DELETE} for _, ms in left for m in ms)
    table = report.to_table(made)
    assert "1 session begun before this run left out" in table
    assert "before-reset/1.0" in table and "0 no connection" not in table
    # The run it connected in scores it as ever.
    assert [(c.client, c.level) for c in earlier.clients] == [("before-reset", 3)]


async def test_a_run_is_scored_in_the_scenario_it_was_played_under(inproc, redis_url) -> None:
    """Issue 33: a run played under `repeated` stayed `repeated` only while the lab
    played it: the next `up` (another scenario) made its report `single`."""
    _, url = await inproc.server(scenario="repeated")
    redis = state.connect(redis_url)
    try:
        run_id = await reader.start_run(redis)  # `mcp-lab reset` under `repeated`
        async with connect(url, "repeated-client") as client:
            await client.read_text()
        # The next `up` plays single: its server says so in mcp:scenario ...
        await redis.set(contract.SCENARIO_KEY, "single")
        assert (await build.build(redis, run=run_id)).scenario.name == "repeated"
        # ... and, as it starts (services/mcp_lab/server/run.py), begins a run of its own.
        began = await reader.play_scenario(redis, "single")
        assert began is not None and began[1] == "repeated"
        current = await build.build(redis)
        old = await build.build(redis, run=run_id)
        asked = await build.build(redis, run=run_id, scenario="single")
    finally:
        await redis.aclose()
    assert (current.run_id, current.scenario.name, current.clients) == (began[0], "single", [])
    assert old.scenario.name == "repeated"
    assert [c.client for c in old.clients] == ["repeated-client"]
    assert [c.key for c in old.clients[0].checks] == ["notified_each", "re_read_each"]
    assert asked.scenario.name == "single"  # --scenario still scores it as another
    assert "scenario repeated" in report.to_table(old).splitlines()[0]
