"""The evidence record on in-process servers (tests/support/inproc.py): what a session did
is scored from Redis and served by the server's own /api/report. test_evidence.py
checks the same through `mcp-lab report` against server processes."""

from __future__ import annotations

import pytest

from services import state
from services.evidence import build, report
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
