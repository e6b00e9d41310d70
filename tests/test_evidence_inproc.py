"""The evidence record on in-process servers (tests/inproc.py): what a session did
is scored from Redis and served by the server's own /api/report. test_evidence.py
checks the same through `mcp-lab report` against server processes."""

from __future__ import annotations

import pytest

from tests.inproc import http_client
from tests.lab import STATUS_URI, RawSession, connect

pytestmark = pytest.mark.anyio

DELAY = "0.3"
BOUND = 10.0


async def api_report(url: str) -> dict:
    http = http_client(url)
    assert http is not None, f"no in-process server at {url}"
    async with http:
        response = await http.get("/api/report")
    assert response.status_code == 200, response.text
    return response.json()


def client_entry(data: dict, name: str) -> dict:
    matches = [c for c in data["clients"] if c["client"] == name]
    assert len(matches) == 1, data["clients"]
    return matches[0]


async def test_full_flow_scores_6_and_list_and_read_scores_3(inproc) -> None:
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
    assert checkpoints["connected"] < checkpoints["notified"] < checkpoints["re_read"]
    recorded = [e["method"] for e in full["sessions"][0]["events"]]
    # The GET stream's evidence (stream/open...) may come before notifications/initialized.
    assert "stream/open" in recorded
    methods = [m for m in recorded if not m.startswith("stream/")]
    assert methods[:2] == ["initialize", "notifications/initialized"]
    assert "notifications/resources/updated" in methods
    reader = client_entry(data, "reader")
    assert (reader["level"], reader["level_name"]) == (3, "read initial")


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
