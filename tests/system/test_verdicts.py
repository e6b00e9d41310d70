"""The lab never blames a client for the lab's own behaviour (issue 11).

- the protocol version logged and reported is the one negotiated;
- data-less (priming) SSE events go only to clients at 2025-11-25 or later;
- a GET that only resumes a POST response stream does not make a notification
  "delivered";
- list methods of capabilities the lab does not advertise are answered with
  empty lists (``MCP_TEST_STRICT_METHODS=true``: -32601), and the notes say so.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client

from mcp_lab import protocol
from tests.support.lab import STATUS_URI, TS_CLIENT_DIR, amcp_lab, lab_env

pytestmark = pytest.mark.anyio

DELAY = "0.5"
BOUND = 15.0
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


@dataclass
class Sse:
    """One SSE event as written on the wire."""

    id: str | None
    retry: int | None
    data: str


def sse_events(lines: list[str]) -> list[Sse]:
    """The events of complete SSE text, split into lines (comments skipped)."""
    events: list[Sse] = []
    fields: dict[str, list[str]] = {}
    for line in [*lines, ""]:
        if not line:
            if fields:
                retry = fields.get("retry")
                events.append(
                    Sse(
                        (fields.get("id") or [None])[0],
                        int(retry[0]) if retry else None,
                        "\n".join(fields.get("data", [])),
                    )
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
    return events


class GetResponse:
    """The events of one open GET stream, read one at a time with a bound."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self.seen: list[Sse] = []
        self._lines = response.aiter_lines()

    async def next(self, timeout: float = BOUND) -> Sse:
        lines: list[str] = []
        with anyio.fail_after(timeout):
            async for line in self._lines:
                if line:
                    lines.append(line)
                    continue
                events = sse_events(lines)
                lines = []
                if events:
                    self.seen.append(events[0])
                    return events[0]
        raise AssertionError("stream ended")

    async def next_message(self, timeout: float = BOUND) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            while not (event := await self.next()).data:
                pass
        return json.loads(event.data)


class RawClient:
    """A hand-made Streamable HTTP client that negotiates ``protocol`` and keeps
    every SSE event of every POST response it gets."""

    def __init__(
        self, url: str, name: str, protocol: str, *, version_header: str | None = ""
    ) -> None:
        self.url = url
        self.name = name
        self.protocol = protocol
        # The MCP-Protocol-Version header after initialize: the protocol ("") or
        # another value, or none at all (None).
        self.version_header = protocol if version_header == "" else version_header
        self.session_id: str | None = None
        self.post_events: list[Sse] = []
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30))
        self._next_id = 0

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    def headers(self, accept: str = "application/json, text/event-stream") -> dict[str, str]:
        headers = {"Accept": accept, "Content-Type": "application/json"}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
            if self.version_header is not None:
                headers["MCP-Protocol-Version"] = self.version_header
        return headers

    async def post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        response = await self._http.post(self.url, json=body, headers=self.headers())
        self.session_id = response.headers.get("mcp-session-id", self.session_id)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return response.status_code, (response.json() if response.text else None)
        events = sse_events(response.text.splitlines())
        self.post_events.extend(events)
        replies = [json.loads(e.data) for e in events if e.data]
        return response.status_code, next((r for r in replies if "id" in r), None)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            body["params"] = params
        status, reply = await self.post(body)
        assert status == 200 and reply is not None, (status, reply)
        return reply

    async def initialize(self) -> dict[str, Any]:
        reply = await self.request(
            protocol.INITIALIZE, protocol.initialize_params(self.name, "0.1", self.protocol),
        )
        status, _ = await self.post(protocol.initialized_notification())
        assert status == 202
        return reply

    @asynccontextmanager
    async def get(self, last_event_id: str | None = None) -> AsyncIterator[GetResponse]:
        headers = self.headers("text/event-stream")
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        async with self._http.stream("GET", self.url, headers=headers) as response:
            assert response.status_code == 200, response.status_code
            yield GetResponse(response)


async def report_json(redis_url: str) -> dict[str, Any]:
    result = await amcp_lab(lab_env(redis_url), "report", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def report_text(redis_url: str, fmt: str) -> str:
    result = await amcp_lab(lab_env(redis_url), "report", "--format", fmt)
    assert result.returncode == 0, result.stderr
    return result.stdout


def client_entry(data: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [c for c in data["clients"] if c["client"] == name]
    assert len(matches) == 1, data["clients"]
    return matches[0]


# 1. The protocol version shown is the one negotiated.


async def test_every_handshake_version_is_logged_and_reported_as_negotiated(lab, redis_url) -> None:
    server, url = await lab.aserver()
    for version in HANDSHAKE_VERSIONS:
        async with RawClient(url, f"speaks-{version}", version) as raw:
            reply = await raw.initialize()
            assert reply["result"]["protocolVersion"] == version
            await raw.request("resources/list")
        await server.await_line(
            rf"\[initialize\] client connected .*client=speaks-{version}/0\.1 "
            rf"protocol={version} "
        )
    assert not server.matching(r"\[initialize\] .*client=speaks-2025-06-18/.* protocol=2025-11-25")

    data = await report_json(redis_url)
    for version in HANDSHAKE_VERSIONS:
        session = client_entry(data, f"speaks-{version}")["sessions"][0]
        assert session["protocol"] == version
        assert session["level"] == 2
    markdown = await report_text(redis_url, "markdown")
    table = await report_text(redis_url, "table")
    for version in HANDSHAKE_VERSIONS:
        assert f"## speaks-{version} 0.1\n\n- MCP connection: yes, {version} over" in markdown
        assert f", {version}, streamable-http)" in table
    base = url.removesuffix("/mcp")
    with urllib.request.urlopen(f"{base}/api/report", timeout=BOUND) as reply:
        dashboard = json.load(reply)
    for version in HANDSHAKE_VERSIONS:
        assert client_entry(dashboard, f"speaks-{version}")["sessions"][0]["protocol"] == version


async def test_a_2026_client_is_reported_at_2026_07_28(lab, redis_url) -> None:
    server, url = await lab.aserver()
    info = mcp_types.Implementation(name="speaks-2026", version="1.0")
    async with Client(url, client_info=info) as client:
        assert client.protocol_version == "2026-07-28"
        await client.list_resources()
    await server.await_line(
        r"\[server/discover\] client connected .*client=speaks-2026/1\.0 protocol=2026"
    )
    session = client_entry(await report_json(redis_url), "speaks-2026")["sessions"][0]
    assert session["protocol"] == "2026-07-28"


# 2. Data-less (priming) events only for clients at 2025-11-25 or later.


async def full_raw_flow(raw: RawClient) -> GetResponse:
    """initialize, GET stream, list, read, subscribe, the notification; the GET stream."""
    await raw.initialize()
    async with raw.get() as stream:
        await raw.request("resources/list")
        await raw.request("resources/read", {"uri": STATUS_URI})
        await raw.request("resources/subscribe", {"uri": STATUS_URI})
        message = await stream.next_message(float(DELAY) + BOUND)
        assert message["method"] == "notifications/resources/updated"
        await raw.request("resources/read", {"uri": STATUS_URI})
        return stream


# POST responses as streams (MCP_TEST_POST_RESPONSES=sse): by default (auto) the
# requests of this flow are answered with JSON bodies, which have no events at all,
# but for the subscribe (it keeps its stream): one event, its answer.
@pytest.mark.parametrize("posts", ["sse", "auto"])
@pytest.mark.parametrize(
    "version_header",
    ["", None, "2025-11-25"],
    ids=["header", "no-header", "header-newer-than-negotiated"],
)
async def test_a_2025_06_18_client_never_gets_an_event_without_data(
    lab, version_header, posts
) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY, post_responses=posts)
    await lab.aupdater(update_delay_seconds=DELAY)
    async with RawClient(url, "old-sse", "2025-06-18", version_header=version_header) as raw:
        stream = await full_raw_flow(raw)
    assert len(raw.post_events) >= 5 if posts == "sse" else len(raw.post_events) == 1
    assert all(e.data for e in raw.post_events), raw.post_events
    assert stream.seen and all(e.data for e in stream.seen), stream.seen
    await server.await_line(r"\[stream/open\] GET .*client=old-sse/0\.1")


async def test_a_2025_11_25_client_still_gets_priming_events(lab) -> None:
    # Priming events on POST responses: only where they are streams.
    server, url = await lab.aserver(
        update_delay_seconds=DELAY, retry_ms="1500", post_responses="sse"
    )
    await lab.aupdater(update_delay_seconds=DELAY)
    async with RawClient(url, "new-sse", "2025-11-25") as raw:
        stream = await full_raw_flow(raw)
    primings = [e for e in raw.post_events if not e.data]
    assert len(primings) >= 4 and all(e.id and e.retry == 1500 for e in primings)
    assert not stream.seen[0].data and stream.seen[0].retry == 1500
    await server.await_line(r"\[stream/open\] GET .*client=new-sse/0\.1")


@pytest.mark.timeout(600)  # the first use installs the SDKs with npm ci
def test_typescript_sdk_at_2025_06_18_runs_the_flow_against_the_default_lab(
    lab, node_client
) -> None:
    server, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
    result = subprocess.run(
        [node_client, "flow.mjs", url, "--sdk", "2025-06-18", "--strict-transport",
         "--client-name", "ts-sdk-2025-06-18", "--timeout", "20"],
        cwd=TS_CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0, result.stdout + result.stderr
    assert steps[0]["protocolVersion"] == "2025-06-18"
    assert steps[0]["sdk"] == "sdk-2025-06-18@1.22.0"
    assert [s["version"] for s in steps if s["step"] == "read"] == [1, 2]
    assert steps[-1]["step"] == "done"
    assert "[sdk onerror]" not in result.stderr
    server.wait_for(r"\[initialize\] .*client=ts-sdk-2025-06-18/1\.22\.0 protocol=2025-06-18 ")


# 3. Only the stream that carries standalone messages makes a notification delivered.


async def test_a_get_resuming_a_post_stream_does_not_make_a_notification_delivered(
    lab, redis_url
) -> None:
    # An initialize answered as a stream (by default, auto, it is one JSON body).
    server, url = await lab.aserver(update_delay_seconds=DELAY, post_responses="sse")
    await lab.aupdater(update_delay_seconds=DELAY)
    async with RawClient(url, "post-resumer", "2025-11-25") as raw:
        await raw.initialize()
        priming = raw.post_events[0]
        assert priming.id and not priming.data
        async with raw.get(last_event_id=priming.id) as stream:
            replayed = await stream.next_message()
            assert replayed["result"]["protocolVersion"] == "2025-11-25"
            mark = server.mark()
            await raw.request("resources/read", {"uri": STATUS_URI})
            await raw.request("resources/subscribe", {"uri": STATUS_URI})
            line = await server.await_line(
                r"\[notification/send\] notifications/resources/updated", float(DELAY) + BOUND, mark
            )
            assert "delivered=no" in line
    await server.await_line(
        r"\[stream/resume\] GET resumes a POST response stream .*client=post-resumer/"
    )
    session = client_entry(await report_json(redis_url), "post-resumer")["sessions"][0]
    assert session["dropped_notifications"] == 1
    assert session["checkpoints"]["notified"] is None
    assert session["level"] == 4


async def test_a_get_resuming_the_get_stream_still_makes_it_delivered(lab, redis_url) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY)
    await lab.aupdater(update_delay_seconds=DELAY)
    async with RawClient(url, "get-resumer", "2025-11-25") as raw:
        await raw.initialize()
        async with raw.get() as stream:
            priming = await stream.next()
        assert priming.id and not priming.data
        await server.await_line(r"\[stream/close\] GET .*client=get-resumer/")
        async with raw.get(last_event_id=priming.id) as stream:
            await server.await_line(r"\[stream/open\] GET resumed .*client=get-resumer/")
            await raw.request("resources/subscribe", {"uri": STATUS_URI})
            message = await stream.next_message(float(DELAY) + BOUND)
            assert message["method"] == "notifications/resources/updated"
    session = client_entry(await report_json(redis_url), "get-resumer")["sessions"][0]
    assert session["checkpoints"]["notified"] is not None
    assert session["dropped_notifications"] == 0


# 4. Unadvertised list methods.


async def test_unadvertised_lists_are_answered_empty_and_noted(lab, redis_url) -> None:
    server, url = await lab.aserver()
    async with RawClient(url, "lister", "2025-11-25") as raw:
        reply = await raw.initialize()
        capabilities = reply["result"]["capabilities"]
        assert "tools" not in capabilities and "prompts" not in capabilities
        assert capabilities["resources"] == {"subscribe": True, "listChanged": True}
        assert (await raw.request("tools/list"))["result"]["tools"] == []
        assert (await raw.request("prompts/list"))["result"]["prompts"] == []
        templates = await raw.request("resources/templates/list")
        assert templates["result"]["resourceTemplates"] == []
        # Listing is not calling: what is not there still cannot be used.
        assert (await raw.request("prompts/get", {"name": "x"}))["error"]["code"] == -32601
    await server.await_line(
        r"\[tools/list\] not advertised; answered with an empty list .*client=lister/"
    )
    notes = client_entry(await report_json(redis_url), "lister")["notes"]
    asked = "asked tools/list, prompts/list (not advertised by default; answered, not refused)"
    assert asked in notes, notes


async def test_with_the_tool_advertised_only_the_unadvertised_list_is_noted(lab, redis_url) -> None:
    server, url = await lab.aserver(enable_tool="true")
    async with RawClient(url, "tool-lister", "2025-11-25") as raw:
        capabilities = (await raw.initialize())["result"]["capabilities"]
        assert "tools" in capabilities and "prompts" not in capabilities
        tools = (await raw.request("tools/list"))["result"]["tools"]
        assert [t["name"] for t in tools] == ["get_review_status"]
        assert (await raw.request("prompts/list"))["result"]["prompts"] == []
    await server.await_line(r"\[prompts/list\] not advertised; answered .*client=tool-lister/")
    notes = client_entry(await report_json(redis_url), "tool-lister")["notes"]
    assert "asked prompts/list (not advertised by default; answered, not refused)" in notes, notes
    assert not any("tools/list" in note for note in notes), notes


async def test_a_2026_client_gets_an_empty_tool_list(lab) -> None:
    _, url = await lab.aserver()
    info = mcp_types.Implementation(name="modern-lister", version="1.0")
    async with Client(url, client_info=info) as client:
        assert client.protocol_version == "2026-07-28"
        caps = client.server_capabilities
        assert caps is not None and caps.tools is None and caps.prompts is None
        assert (await client.list_tools()).tools == []


async def test_strict_methods_refuse_unadvertised_lists(lab, redis_url) -> None:
    _, url = await lab.aserver(strict_methods="true")
    async with RawClient(url, "strict-lister", "2025-11-25") as raw:
        capabilities = (await raw.initialize())["result"]["capabilities"]
        assert "tools" not in capabilities and "prompts" not in capabilities
        assert (await raw.request("prompts/list"))["error"]["code"] == -32601
        assert (await raw.request("tools/list"))["error"]["code"] == -32601
    notes = client_entry(await report_json(redis_url), "strict-lister")["notes"]
    assert any(
        "asked prompts/list, tools/list (not advertised) and left after the error" in n
        for n in notes
    ), notes


# 5. A listen that never names the resource is logged with what it asked for.


async def test_a_listen_for_list_changes_only_is_logged_and_noted(lab, redis_url) -> None:
    server, url = await lab.aserver()
    info = mcp_types.Implementation(name="list-listener", version="1.0")
    async with Client(url, client_info=info) as client:
        await client.list_resources()
        with anyio.fail_after(BOUND):
            async with client.listen(tools_list_changed=True, resources_list_changed=True):
                await server.await_line(
                    r"\[subscriptions/listen\] opened resources=none "
                    r"list_changed=resources,tools .*client=list-listener/1\.0"
                )
    notes = client_entry(await report_json(redis_url), "list-listener")["notes"]
    assert "listen asked only for list-changed events, never for the resource" in notes, notes


async def test_a_get_stream_dropped_right_after_its_priming_event_is_noted(lab, redis_url) -> None:
    server, url = await lab.aserver()
    async with RawClient(url, "priming-breaker", "2025-11-25") as raw:
        await raw.initialize()
        async with raw.get() as stream:
            assert not (await stream.next()).data
        await server.await_line(r"\[stream/close\] GET .*client=priming-breaker/")
        await raw.request("resources/list")
    entry = client_entry(await report_json(redis_url), "priming-breaker")
    methods = [e["method"] for e in entry["sessions"][0]["events"]]
    assert methods.count("stream/open") == 1 and methods.count("stream/close") == 1
    assert methods.count("stream/priming") == 1
    assert any("stream broke after a data-less event" in n for n in entry["notes"]), entry["notes"]
    assert "never sent resources/subscribe" in entry["notes"]
