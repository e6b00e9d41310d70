"""The lab against the 2026-07-28 revision's own server requirements, on the wire.

Each test quotes the requirement it checks (page of ``docs/specification/2026-07-28/``
in modelcontextprotocol/modelcontextprotocol, and section). The lab's real ASGI app runs
in memory (tests/support/inproc.py); requests are raw JSON-RPC POSTs, so what is checked
is exactly what a client receives. Era fallback over stdio: tests/system/test_era_fallback.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import Scenario
from tests.support.http_calls import HEADERS, client_of
from tests.support.lab import STATUS_URI
from tests.support.sse import SseStream

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
UPDATED = "notifications/resources/updated"
CHANNEL = "mcp:resources:updated"
BOUND = 10.0
# server/caching.mdx, "Cacheable Results": the operations whose results carry hints.
CACHEABLE = (
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
)


def envelope(name: str = "conformance") -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1.0"},
    }


def request(method: str, request_id: int | str, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": envelope()},
    }


def headers_of(body: dict[str, Any]) -> dict[str, str]:
    """The 2026-07-28 request headers (streamable-http.mdx, "Standard Request Headers")."""
    headers = {**HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": body["method"]}
    name = body["params"].get("uri") or body["params"].get("name")
    if name:
        headers["Mcp-Name"] = name
    return headers


async def call(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON-RPC response to ``body`` (one JSON body, or the last event of an SSE one)."""
    async with client_of(url) as http:
        with anyio.fail_after(BOUND):
            answer = await http.post(url, content=json.dumps(body), headers=headers_of(body))
    assert answer.status_code == 200, (answer.status_code, answer.text)
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        datas = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
        messages = [json.loads(d) for d in datas if d]
        responses = [m for m in messages if m.get("id") == body["id"] and "method" not in m]
        assert len(responses) == 1, messages
        return responses[0]
    return answer.json()


@asynccontextmanager
async def listen_stream(url: str, request_id: int | str, **wanted: Any) -> AsyncIterator[SseStream]:
    """A raw ``subscriptions/listen`` POST whose SSE response stays open."""
    body = request("subscriptions/listen", request_id, notifications=wanted)
    async with (
        client_of(url) as http,
        http.stream("POST", url, content=json.dumps(body), headers=headers_of(body)) as response,
    ):
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        yield SseStream(response)


async def cacheable_results(url: str) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for number, method in enumerate(CACHEABLE, start=1):
        params = {"uri": STATUS_URI} if method == "resources/read" else {}
        answer = await call(url, request(method, number, **params))
        assert "result" in answer, (method, answer)
        results[method] = answer["result"]
    return results


# --- server/utilities/caching.mdx ---------------------------------------------------------


async def test_every_cacheable_result_carries_ttl_ms_and_cache_scope(inproc) -> None:
    """caching.mdx, "Cacheable Results": "Servers MUST include caching hints on results
    with `resultType: "complete"` returned by the following operations: `server/discover`,
    `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`,
    `resources/read`"; "Cacheable Model": "`cacheScope` [...] either `"public"` or
    `"private"`"."""
    _, url = await inproc.server()
    for method, result in (await cacheable_results(url)).items():
        assert result.get("resultType") == "complete", (method, result)
        assert isinstance(result.get("ttlMs"), int), (method, result)
        assert result.get("cacheScope") in ("public", "private"), (method, result)


async def test_ttl_ms_is_never_negative_and_zero_by_default(inproc) -> None:
    """caching.mdx, "Time-to-Live (TTL) Field": "Servers **MUST** provide a `ttlMs` value
    that is `>= 0`." The lab's default (issue 43) is 0: "If `ttlMs` is `0`, the response
    **SHOULD** be considered immediately stale", so a client re-reads after every update."""
    _, url = await inproc.server()
    for method, result in (await cacheable_results(url)).items():
        assert result["ttlMs"] == 0, (method, result)


async def test_hints_are_the_same_on_every_call_of_a_method(inproc) -> None:
    """caching.mdx, "Interaction with Pagination": "Servers **MUST** apply the same
    `cacheScope` to all response pages for a given list request." The lab's lists have
    one page; the scope (and TTL) of a method does not change between calls."""
    _, url = await inproc.server()
    first, second = await cacheable_results(url), await cacheable_results(url)
    for method in CACHEABLE:
        hints = [(r[method]["ttlMs"], r[method]["cacheScope"]) for r in (first, second)]
        assert hints[0] == hints[1], (method, hints)
        assert "nextCursor" not in first[method], (method, first[method])


@pytest.fixture
def cached_scenario() -> Iterator[Scenario]:
    """The default scenario with caching hints of its own (30 s, public)."""
    played = dataclasses.replace(
        registry.get(registry.DEFAULT),
        name="cached-in-a-test",
        cache_ttl_ms=30_000,
        cache_scope="public",
    )
    registry.register(played)
    try:
        yield played
    finally:
        registry.forget(played.name)


async def test_a_scenario_sets_the_hints_of_every_cacheable_result(inproc, cached_scenario) -> None:
    """caching.mdx, "Time-to-Live (TTL) Field": "If `ttlMs` is positive, the client
    **SHOULD** consider the result fresh for that many milliseconds after receiving the
    response." A scenario that asks a client to cache gets ``ttlMs``/``cacheScope`` of
    its own on every cacheable result."""
    _, url = await inproc.server(scenario=cached_scenario.name)
    for method, result in (await cacheable_results(url)).items():
        assert (result["ttlMs"], result["cacheScope"]) == (30_000, "public"), (method, result)


# --- basic/patterns/subscriptions.mdx -----------------------------------------------------


async def test_listen_acknowledgement_is_the_first_message_and_carries_the_id(
    inproc, redis_client
) -> None:
    """subscriptions.mdx, "Acknowledgment": "The server **MUST** send
    `notifications/subscriptions/acknowledged` as the first message carrying the
    subscription's ID in `_meta` under `io.modelcontextprotocol/subscriptionId`, and
    **MUST NOT** send any notification on the subscription before it." The update is
    published as soon as the lab has subscribed the stream, before anything on it is
    read: it still comes after the acknowledgement."""
    server, url = await inproc.server(update_delay_seconds="600")
    async with listen_stream(url, "listen-ack", resourceSubscriptions=[STATUS_URI]) as stream:
        await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
        assert redis_client.publish(CHANNEL, STATUS_URI) >= 1
        first = (await stream.next_message(BOUND)).message
        assert first["method"] == ACKNOWLEDGED, first
        assert first["params"]["_meta"][SUBSCRIPTION_ID] == "listen-ack"
        assert "id" not in first  # a notification, not the response
        second = (await stream.next_message(BOUND)).message
        assert second["method"] == UPDATED, second


async def test_acknowledgement_names_the_honoured_subset(inproc) -> None:
    """subscriptions.mdx, "Acknowledgment": "The `notifications` field in the
    acknowledgment reflects the subset the server agreed to honor. Notification types the
    server does not support are omitted." The lab sends resource updates and the resource
    list's changes; it has no tools or prompts that change (it does not advertise them)."""
    _, url = await inproc.server(update_delay_seconds="600")
    wanted = {
        "resourceSubscriptions": [STATUS_URI],
        "resourcesListChanged": True,
        "toolsListChanged": True,
        "promptsListChanged": True,
    }
    async with listen_stream(url, 7, **wanted) as stream:
        ack = (await stream.next_message(BOUND)).message
    honoured = ack["params"]["notifications"]
    assert honoured.get("resourceSubscriptions") == [STATUS_URI]
    assert honoured.get("resourcesListChanged") is True
    assert "toolsListChanged" not in honoured and "promptsListChanged" not in honoured, honoured


async def test_every_notification_on_the_stream_carries_the_listen_request_id(
    inproc, redis_client
) -> None:
    """subscriptions.mdx, "Receiving Notifications": "All notifications delivered on the
    stream carry `io.modelcontextprotocol/subscriptionId` in `_meta`, identifying the
    `subscriptions/listen` request that opened the stream. The value is the JSON-RPC ID of
    the `subscriptions/listen` request." Checked with a numeric and a string id."""
    server, url = await inproc.server(update_delay_seconds="600")
    for listen_id in (41, "listen-41"):
        async with listen_stream(url, listen_id, resourceSubscriptions=[STATUS_URI]) as stream:
            ack = (await stream.next_message(BOUND)).message
            assert ack["params"]["_meta"][SUBSCRIPTION_ID] == listen_id
            await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
            assert redis_client.publish(CHANNEL, STATUS_URI) >= 1
            updated = (await stream.next_message(BOUND)).message
        assert updated["method"] == UPDATED and updated["params"]["uri"] == STATUS_URI
        assert updated["params"]["_meta"][SUBSCRIPTION_ID] == listen_id, updated


async def test_no_notification_type_the_client_did_not_request(inproc, redis_client) -> None:
    """subscriptions.mdx, "Opening a Stream": "The server **MUST NOT** send notification
    types the client has not explicitly requested." A stream that asked for the resource
    list's changes only gets no ``resources/updated`` when another stream's URI updates."""
    server, url = await inproc.server(update_delay_seconds="600")
    async with listen_stream(url, "list-only", resourcesListChanged=True) as quiet:
        assert (await quiet.next_message(BOUND)).message["method"] == ACKNOWLEDGED
        async with listen_stream(url, "named", resourceSubscriptions=[STATUS_URI]) as named:
            assert (await named.next_message(BOUND)).message["method"] == ACKNOWLEDGED
            await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
            assert redis_client.publish(CHANNEL, STATUS_URI) >= 1
            assert (await named.next_message(BOUND)).message["method"] == UPDATED
        # The named stream got its update; the quiet one has nothing to read.
        with anyio.move_on_after(0.5) as waited:
            extra = await quiet.next_message(BOUND)
            raise AssertionError(f"unrequested message on the stream: {extra.message}")
        assert waited.cancelled_caught


async def test_a_graceful_end_is_the_complete_result_tagged_with_the_id(inproc) -> None:
    """subscriptions.mdx, "Graceful Closure": "When the server ends a subscription on its
    own initiative (for example, during shutdown), it **SHOULD** respond to the original
    `subscriptions/listen` request with a completion result before closing the stream."
    The example result is ``{"resultType": "complete", "_meta":
    {"io.modelcontextprotocol/subscriptionId": 1}}``, and "Like every other message on the
    stream, the response carries `io.modelcontextprotocol/subscriptionId` in `_meta`". The
    lab ends its listen streams when the server starts to stop (``lab.closing``), then
    the stream ends."""
    server, url = await inproc.server(update_delay_seconds="600")
    async with listen_stream(url, 9, resourceSubscriptions=[STATUS_URI]) as stream:
        assert (await stream.next_message(BOUND)).message["method"] == ACKNOWLEDGED
        await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
        server.lab.closing.set()
        final = (await stream.next_message(BOUND)).message
        with pytest.raises(AssertionError, match="stream ended"):
            await stream.next(BOUND)  # and the stream ends after it
    assert final["id"] == 9 and "error" not in final, final
    assert final["result"]["resultType"] == "complete", final
    assert final["result"]["_meta"][SUBSCRIPTION_ID] == 9, final
    # "The result carries no method-specific data beyond the standard result fields and
    # subscription metadata."
    assert set(final["result"]) == {"resultType", "_meta"}, final
    await server.await_line(r"\[subscriptions/listen\] stream ended")
