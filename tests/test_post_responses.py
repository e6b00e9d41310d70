"""``MCP_TEST_POST_RESPONSES``: a POST answered as an SSE stream (the default) or as
one JSON body. Either way the flow completes and its evidence is whole; only with
``sse`` does a POST's response leave a resume record (priming event, response)."""

from __future__ import annotations

from typing import cast

import pytest

from services import contract
from tests.inproc import http_client
from tests.lab import STATUS_URI, RawSession, connect, version_of
from tests.test_evidence_inproc import api_report, client_entry

pytestmark = pytest.mark.anyio

DELAY = "0.3"
BOUND = 10.0
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "post-responses", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CONTENT_TYPE = {"sse": "text/event-stream", "json": "application/json"}


@pytest.mark.parametrize("mode", ["sse", "json"])
async def test_a_post_is_answered_as_set_and_the_flow_keeps_its_evidence(inproc, mode) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY, post_responses=mode)
    await inproc.updater(update_delay_seconds=DELAY)

    http = http_client(url)
    assert http is not None
    async with http:
        response = await http.post(url, json=INIT, headers=HEADERS)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(CONTENT_TYPE[mode])

    name = f"post-{mode}"
    async with connect(url, name) as client:
        assert version_of(await client.read_text()) == 1
        await client.session.subscribe_resource(STATUS_URI)
        assert await client.wait_updated(1, timeout=float(DELAY) + BOUND) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2
    await server.await_line(rf"\[session/end\] .*client={name}/")

    entry = client_entry(await api_report(url), name)
    assert (entry["level"], entry["level_name"]) == (6, "re-read")
    events = entry["sessions"][0]["events"]
    recorded = {(e["direction"], e["method"]) for e in events}
    assert {
        ("in", "initialize"),
        ("in", "stream/open"),
        ("in", "resources/subscribe"),
        ("out", "notifications/resources/updated"),
        ("in", "resources/read"),
    } <= recorded
    reads = [e.get("version") for e in events if e["method"] == "resources/read"]
    assert reads == [1, 2]


@pytest.mark.parametrize("mode", ["sse", "json"])
async def test_only_an_sse_post_leaves_a_resume_record(inproc, mode) -> None:
    server, url = await inproc.server(post_responses=mode)
    raw = RawSession(url, f"record-{mode}")
    try:
        await raw.initialize()
        reply = await raw.request("resources/read", {"uri": STATUS_URI})
        assert version_of(reply["result"]["contents"][0]["text"]) == 1
        assert raw.session_id is not None
        entries = cast(
            list[tuple[str, dict[str, str]]],
            await server.lab.redis.xrange(contract.resume_key(raw.session_id)),
        )
    finally:
        await raw.close()
    # No GET stream was opened: whatever is kept came from the POST responses.
    kept = [fields[contract.RESUME_STREAM_FIELD] for _, fields in entries]
    if mode == "json":
        assert kept == []
    else:
        assert len(kept) >= 2  # the read's priming event and its response, at least
