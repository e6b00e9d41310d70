"""The evidence record and `mcp-lab report`, against real processes and real clients."""

from __future__ import annotations

import json

import pytest

from tests.lab import STATUS_URI, RawSession, connect, lab_env, mcp_lab

pytestmark = pytest.mark.anyio

DELAY = "0.5"
BOUND = 10.0


def report(redis_url: str, *args: str) -> str:
    result = mcp_lab(lab_env(redis_url), "report", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def reset(redis_url: str) -> None:
    result = mcp_lab(lab_env(redis_url), "reset")
    assert result.returncode == 0, result.stderr


def client_entry(data: dict, name: str) -> dict:
    matches = [c for c in data["clients"] if c["client"] == name]
    assert len(matches) == 1, data["clients"]
    return matches[0]


async def test_full_flow_scores_6_and_list_and_read_scores_3(lab, redis_url) -> None:
    server, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
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

    data = json.loads(report(redis_url, "--format", "json"))
    full = client_entry(data, "full-flow")
    assert (full["level"], full["level_name"]) == (6, "re-read")
    checkpoints = full["sessions"][0]["checkpoints"]
    assert all(
        checkpoints[name]
        for name in ("connected", "discovered", "read_initial", "subscribed", "notified", "re_read")
    )
    assert checkpoints["connected"] < checkpoints["notified"] < checkpoints["re_read"]
    assert full["sessions"][0]["reread_delay_ms"] >= 0
    methods = [e["method"] for e in full["sessions"][0]["events"]]
    assert methods[:2] == ["initialize", "notifications/initialized"]
    assert "notifications/resources/updated" in methods
    reader = client_entry(data, "reader")
    assert (reader["level"], reader["level_name"]) == (3, "read initial")
    assert any("never subscribed" in note for note in reader["notes"])

    markdown = report(redis_url, "--format", "markdown")
    assert "## full-flow 1.0\n" in markdown and "## reader 1.0\n" in markdown
    full_block = markdown.split("## full-flow 1.0\n")[1].split("\n## ")[0]
    for line in (
        "- MCP connection: yes, 2025-11-25 over streamable-http (1 session)",
        "- Calls resources/list? yes (",
        "- Calls resources/read? yes, version 1 (",
        "- Calls resources/subscribe? yes (",
        "- Receives notifications/resources/updated? yes, on an open stream (",
        "- Re-reads after the update? yes, version 2 or later (",
        "- Notes: level 6 (re-read)",
    ):
        assert line in full_block, full_block
    table = report(redis_url)
    assert "full-flow/1.0" in table and "6 re-read" in table and "3 read initial" in table


async def test_notification_without_a_get_stream_is_recorded_as_dropped(lab, redis_url) -> None:
    server, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
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
    entry = client_entry(json.loads(report(redis_url, "--format", "json")), "no-get-stream")
    assert entry["level"] == 4
    assert entry["sessions"][0]["dropped_notifications"] == 1
    assert any("dropped" in note for note in entry["notes"])


async def test_every_inbound_message_is_recorded_with_its_error(lab, redis_url) -> None:
    _, url = lab.server()
    raw = RawSession(url, "odd-client")
    try:
        await raw.initialize()
        unknown = await raw.request("no/such/method")
        assert unknown["error"]["code"] == -32601
        missing = await raw.request("resources/read", {"uri": "test://missing"})
        assert missing["error"]["code"] == -32002
    finally:
        await raw.close()
    entry = client_entry(json.loads(report(redis_url, "--format", "json")), "odd-client")
    events = [(e["method"], e["error"]) for e in entry["sessions"][0]["events"]]
    assert events == [
        ("initialize", None),
        ("notifications/initialized", None),
        ("no/such/method", -32601),
        ("resources/read", -32002),
    ]
    assert entry["level"] == 1


async def test_reset_starts_a_new_run_and_old_runs_stay_readable(lab, redis_url) -> None:
    _, url = lab.server()
    async with connect(url, "before-reset") as client:
        await client.read_text()
    reset(redis_url)
    async with connect(url, "after-reset") as client:
        await client.session.list_resources()
    data = json.loads(report(redis_url, "--format", "json"))
    assert [c["client"] for c in data["clients"]] == ["after-reset"]
    assert data["run"]["id"] != "0-0" and data["run"]["started"]
    everything = json.loads(report(redis_url, "--format", "json", "--run", "0-0"))
    assert [c["client"] for c in everything["clients"]] == ["before-reset"]
    recent = json.loads(report(redis_url, "--format", "json", "--since", "1h"))
    assert {c["client"] for c in recent["clients"]} == {"before-reset", "after-reset"}
