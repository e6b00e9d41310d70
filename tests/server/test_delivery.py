"""The relay's delivery paths (services/mcp_lab/server/delivery.py) on in-process servers:
each subscriber's delivery names its path (a Streamable HTTP session's GET stream, a
legacy SSE session, the client of a stdio server, a listen stream), and the fan-out
is handed only the subscribers whose delivery is batched."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio
import fastmcp
import httpx2
import mcp_types
import pytest
from mcp import Client, ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.server import peers
from mcp_lab.server.app import build_lab
from mcp_lab.server.delivery import DeliveryKind, GetStreamDelivery
from mcp_lab.server.fanout import Target
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from tests.support.inproc import http_client, lab_settings
from tests.support.sse import CHANNEL, get_stream_in_process, subscribed_raw

pytestmark = pytest.mark.anyio

STATUS_URI = REVIEW_STATUS.uri


def _in_memory(url: str) -> httpx2.AsyncClient:
    client = http_client(url)
    assert client is not None, f"no in-process server at {url}"
    return client


def _sse_clients(url: str) -> Callable[..., httpx2.AsyncClient]:
    """An httpx2 client factory for the SDK's SSE client: the in-process server, in memory."""

    def make(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        client = _in_memory(url)
        if headers:
            client.headers.update(headers)
        if timeout is not None:
            client.timeout = timeout
        return client

    return make


def _named(name: str) -> mcp_types.Implementation:
    return mcp_types.Implementation(name=name, version="1")


async def _subscriber_of(registry: SessionRegistry, client: str) -> Subscriber:
    """The subscriber here whose client is named ``client`` (waited for, bounded)."""
    with anyio.fail_after(10):
        while True:
            found = [s for s in registry.all_subscribers() if s.peer.client_name == client]
            if found:
                assert len(found) == 1, found
                return found[0]
            await anyio.sleep(0.01)


async def test_each_path_names_its_delivery(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds="600")
    registry = server.lab.registry
    info = _named("kind-listen")
    raw = await subscribed_raw(url, "kind-http")
    try:
        async with contextlib.AsyncExitStack() as held:
            sse = sse_client(server.settings.sse_url, httpx_client_factory=_sse_clients(url))
            read, write = await held.enter_async_context(sse)
            legacy = ClientSession(read, write, client_info=_named("kind-sse"))
            await held.enter_async_context(legacy)
            await legacy.initialize()
            await legacy.subscribe_resource(STATUS_URI)

            modern = Client(
                streamable_http_client(url, http_client=_in_memory(url)), client_info=info
            )
            listening = await held.enter_async_context(modern)
            await held.enter_async_context(listening.listen(resource_subscriptions=[STATUS_URI]))

            http = await _subscriber_of(registry, "kind-http")
            assert http.delivery.kind == DeliveryKind.GET_STREAM == "get-stream"
            # The adapter found its GET stream: the fan-out writes it (open or not).
            assert isinstance(http.delivery, GetStreamDelivery)
            assert http.delivery.stream is not None and http.delivery.batched
            assert not http.delivery.can_deliver(registry)  # no GET stream open yet
            # Its list_changed listener, from initialize, goes through the SDK's senders.
            (listener,) = registry.list_listeners(str(raw.session_id))
            assert listener.delivery.kind == DeliveryKind.GET_STREAM
            assert not listener.delivery.batched

            old = await _subscriber_of(registry, "kind-sse")
            assert old.delivery.kind == DeliveryKind.SSE == "sse"
            assert not old.delivery.batched and old.delivery.can_deliver(registry)

            listen = await _subscriber_of(registry, "kind-listen")
            assert listen.delivery.kind == DeliveryKind.LISTEN == "listen"
            assert not listen.delivery.batched and listen.delivery.can_deliver(registry)
    finally:
        await raw.close()


async def test_a_stdio_client_is_reached_through_its_connection(redis_url) -> None:
    # The lab's stdio server is its FastMCP server run over a pair of streams with no
    # HTTP request behind its messages (run.py, run_stdio); here the streams are
    # FastMCP's in-memory pair instead of stdin and stdout.
    mcp, lab = build_lab(lab_settings(redis_url, update_delay_seconds="600"))
    with peers.serving_stdio():
        async with fastmcp.Client(mcp, client_info=_named("kind-stdio"), mode="legacy") as client:
            await client.session.subscribe_resource(STATUS_URI)
            stdio = await _subscriber_of(lab.registry, "kind-stdio")
            assert stdio.delivery.kind == DeliveryKind.STDIO == "stdio"
            assert not stdio.delivery.batched and stdio.delivery.can_deliver(lab.registry)


async def test_only_batched_deliveries_are_handed_to_the_fan_out(
    inproc, redis_client, monkeypatch
) -> None:
    """A subscriber without a GET stream of its own (a listen stream) is notified
    through its delivery, never by the fan-out; a Streamable HTTP session is handed
    to the fan-out whether its GET stream is open or not (its event is kept for
    resumption either way), and recorded delivered only while it is open."""
    server, url = await inproc.server(update_delay_seconds="600", state_scope="shared")
    fan_out = server.lab.relay._notifier._fanout
    handed: list[Target] = []
    write = fan_out.fan_out

    async def noting(targets: list[Target]) -> None:
        handed.extend(targets)
        await write(targets)

    monkeypatch.setattr(fan_out, "fan_out", noting)
    opened = await subscribed_raw(url, "with-get")
    shut = await subscribed_raw(url, "without-get")
    modern = Client(
        streamable_http_client(url, http_client=_in_memory(url)), client_info=_named("listener")
    )
    try:
        async with (
            get_stream_in_process(url, str(opened.session_id)) as stream,
            modern as listening,
            listening.listen(resource_subscriptions=[STATUS_URI]) as updates,
        ):
            await stream.next()  # the priming event: the GET stream is open
            listen = await _subscriber_of(server.lab.registry, "listener")
            mark = server.mark()
            assert redis_client.publish(CHANNEL, STATUS_URI) == 1
            with anyio.fail_after(15):
                await stream.next_message()
                async for update in updates:
                    assert update.uri == STATUS_URI
                    break
            for name in ("with-get", "listener"):
                await server.await_line(
                    rf"\[notification/send\] .*client={name}/(?!.*delivered=no)", since=mark
                )
            await server.await_line(
                r"\[notification/send\] .*client=without-get/.* delivered=no ", since=mark
            )
    finally:
        await opened.close()
        await shut.close()
    names = sorted(one.target.peer.client_name for one in handed)
    assert names == ["with-get", "without-get"], names
    assert all(one.target is not listen for one in handed)
