"""``MCP_TEST_POST_RESPONSES``: a POST answered as one JSON body when its request sends
the client nothing else (``auto``, the default), always as an SSE stream (``sse``) or
always as one JSON body (``json``). Either way the flow completes and its evidence is
whole; only a POST answered as a stream leaves a resume record (priming event,
response)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import cast

import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client

from mcp_lab import contract, protocol
from tests.support.inproc import api_report, client_entry, http_client
from tests.support.lab import (
    STATUS_URI,
    LabClient,
    RawSession,
    _recording_session,
    connect,
    version_of,
)

pytestmark = pytest.mark.anyio

DELAY = "0.3"
BOUND = 10.0
INIT = protocol.initialize_request("post-responses", "0")
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# How each setting answers an initialize POST.
CONTENT_TYPE = {"auto": "application/json", "sse": "text/event-stream", "json": "application/json"}
MODES = ["auto", "sse", "json"]


@pytest.mark.parametrize("mode", MODES)
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


@pytest.mark.parametrize("mode", MODES)
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
    if mode in ("auto", "json"):
        assert kept == []
    else:
        assert len(kept) >= 2  # the read's priming event and its response, at least


# The default (auto): JSON where a stream would carry the answer alone.


@contextlib.asynccontextmanager
async def recorded(url: str, name: str, answers: list[tuple[str, str]]) -> AsyncIterator[LabClient]:
    """An SDK client session (mcp's ``ClientSession`` over Streamable HTTP, in memory)
    whose POSTed requests are noted in ``answers`` with the media type of their answer."""

    async def note(response: httpx2.Response) -> None:
        if response.request.method != "POST":
            return
        body = json.loads(response.request.content or b"null")
        if isinstance(body, dict) and "id" in body:
            media = response.headers.get("content-type", "").split(";")[0].strip()
            answers.append((body["method"], media))

    http = http_client(url)
    assert http is not None
    http.event_hooks["response"].append(note)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(http)
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        yield await stack.enter_async_context(_recording_session(read, write, name))


async def test_by_default_reads_and_lists_are_answered_as_json(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)
    answers: list[tuple[str, str]] = []
    async with recorded(url, "auto-json", answers) as client:
        await client.session.list_resources()
        await client.session.list_resource_templates()
        assert version_of(await client.read_text()) == 1
        await client.session.subscribe_resource(STATUS_URI)
        assert await client.wait_updated(1, timeout=float(DELAY) + BOUND) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2
        await client.session.unsubscribe_resource(STATUS_URI)
        await client.session.send_ping()
    as_json, as_sse = "application/json", "text/event-stream"
    assert answers == [
        ("initialize", as_json),
        ("resources/list", as_json),
        ("resources/templates/list", as_json),
        ("resources/read", as_json),
        ("resources/subscribe", as_sse),  # resumable if cut off before its answer
        ("resources/read", as_json),
        ("resources/unsubscribe", as_json),
        ("ping", as_json),
    ]
    assert {m for m, media in answers if media == as_json} <= protocol.ANSWERED_AS_JSON
    await server.await_line(r"\[session/end\] .*client=auto-json/")

    # The evidence is whole, and the notification came on the GET stream.
    entry = client_entry(await api_report(url), "auto-json")
    assert (entry["level"], entry["level_name"]) == (6, "re-read")
    events = entry["sessions"][0]["events"]
    assert [e.get("version") for e in events if e["method"] == "resources/read"] == [1, 2]
    sent = {(e["direction"], e["method"]) for e in events}
    assert ("out", "notifications/resources/updated") in sent


async def test_by_default_a_json_answer_leaves_no_resume_record(inproc) -> None:
    server, url = await inproc.server()
    raw = RawSession(url, "auto-kept")
    try:
        await raw.initialize()
        for _ in range(3):
            reply = await raw.request("resources/read", {"uri": STATUS_URI})
            assert version_of(reply["result"]["contents"][0]["text"]) == 1
        assert raw.session_id is not None
        assert await server.lab.redis.xlen(contract.resume_key(raw.session_id)) == 0
    finally:
        await raw.close()


async def test_a_tool_call_keeps_its_stream_by_default(inproc) -> None:
    _, url = await inproc.server(enable_tool="true")
    answers: list[tuple[str, str]] = []
    async with recorded(url, "auto-tool", answers) as client:
        await client.session.list_tools()
        result = await client.session.call_tool("get_review_status", {})
        assert not result.is_error
    assert answers == [
        ("initialize", "application/json"),
        ("tools/list", "application/json"),
        ("tools/call", "text/event-stream"),
    ]


async def answer_to(url: str, accept: str) -> tuple[int, str]:
    """Status and media type of the answer to an initialize POSTed with ``accept``."""
    http = http_client(url)
    assert http is not None
    async with http:
        response = await http.post(
            url, json=INIT, headers={"Accept": accept, "Content-Type": "application/json"}
        )
    return response.status_code, response.headers.get("content-type", "").split(";")[0]


@pytest.mark.parametrize(
    "accept",
    ["text/event-stream", "application/json", "application/json, text/event-stream", "*/*"],
)
async def test_json_goes_only_to_a_client_that_accepts_both(inproc, accept) -> None:
    """``auto`` answers with JSON only what ``sse`` answers with a stream; a client
    whose Accept does not name both media types is answered as ``sse`` answers it
    (the SDK refuses it with 406), never with JSON."""
    _, auto_url = await inproc.server()
    _, sse_url = await inproc.server(post_responses="sse")
    auto = await answer_to(auto_url, accept)
    sse = await answer_to(sse_url, accept)
    if sse == (200, "text/event-stream"):
        assert auto == (200, "application/json")
    else:
        assert auto == sse
        assert auto[0] == 406
