"""The lab's writer of a session's standalone GET stream (services/mcp_lab/server/get_writer.py,
wired into each transport by mcp_adapter.write_get_streams): what it sends, and
each way a stream ends (the session ends, the client leaves, the server stops)."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from mcp_lab import sse
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.server import get_writer
from tests.support.inproc import http_client
from tests.support.sse import (
    CHANNEL,
    assert_updated,
    get_headers,
    get_stream_in_process,
    subscribed_raw,
)

pytestmark = pytest.mark.anyio

HEADERS = [(b"content-type", b"text/event-stream")]


class Client:
    """The ASGI side of one GET: what the writer sent; its ``receive`` reports a
    disconnect once ``leave`` is set."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.leave = anyio.Event()
        self._changed = anyio.Event()

    async def send(self, message: Any) -> None:
        self.sent.append(message)
        self._changed.set()
        self._changed = anyio.Event()

    async def receive(self) -> Any:
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def sent_body(self, starting: bytes) -> None:
        with anyio.fail_after(5):
            while not any(body.startswith(starting) for body in self.bodies()):
                await self._changed.wait()

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]

    async def served(
        self,
        queue: Any,
        closing: asyncio.Event | None = None,
        ping_seconds: float = get_writer.PING_SECONDS,
    ) -> None:
        """The writer serving ``queue`` to this client until the stream ends."""
        await get_writer.serve(
            queue, self.receive, self.send, headers=HEADERS, event_of=event_of,
            closing=closing or asyncio.Event(), ping_seconds=ping_seconds,
        )  # fmt: skip


def event_of(text: str) -> bytes:
    return sse.frame(text, event="message", event_id=text)


async def test_each_message_goes_out_as_one_event_and_the_body_ends_with_the_queue() -> None:
    client = Client()
    tx, rx = anyio.create_memory_object_stream[str](10)
    tx.send_nowait("first")
    tx.send_nowait("second")
    tx.close()  # the SDK's clean-up at the session's end
    with anyio.fail_after(5):
        await client.served(rx)
    assert client.sent[0] == {"type": "http.response.start", "status": 200, "headers": HEADERS}
    assert client.bodies() == [event_of("first"), event_of("second"), b""]
    assert client.sent[-1]["more_body"] is False


async def test_a_queue_closed_under_the_waiting_writer_ends_the_stream_quietly() -> None:
    # What the SDK's _clean_up_memory_streams does when a client DELETEs its session:
    # both ends closed, the reader's too, while the writer waits on it.
    client = Client()
    tx, rx = anyio.create_memory_object_stream[str](10)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.served, rx)
        tx.send_nowait("only")
        await client.sent_body(event_of("only"))
        await tx.aclose()
        await rx.aclose()
    assert client.bodies() == [event_of("only"), b""]


async def test_a_client_that_leaves_ends_the_stream_and_closes_its_queue() -> None:
    client = Client()
    tx, rx = anyio.create_memory_object_stream[str](10)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.served, rx)
        tx.send_nowait("one")
        await client.sent_body(event_of("one"))
        client.leave.set()
    assert client.bodies() == [event_of("one")]  # nothing more after the client left
    with pytest.raises(anyio.BrokenResourceError):
        tx.send_nowait("after")
    tx.close()


async def test_the_server_closing_ends_every_stream_and_its_body() -> None:
    closing = asyncio.Event()
    clients = [Client() for _ in range(3)]
    senders = []
    async with anyio.create_task_group() as tasks:
        for client in clients:
            tx, rx = anyio.create_memory_object_stream[str](10)
            senders.append(tx)
            tasks.start_soon(client.served, rx, closing)
        await anyio.wait_all_tasks_blocked()
        closing.set()
    for tx in senders:
        tx.close()
    for client in clients:
        assert client.bodies() == [b""] and client.sent[-1]["more_body"] is False


async def test_an_idle_stream_is_pinged_with_a_comment() -> None:
    client = Client()
    tx, rx = anyio.create_memory_object_stream[str](10)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.served, rx, None, 0.01)
        await client.sent_body(b": ping - ")
        client.leave.set()
    tx.close()
    ping = client.bodies()[0]
    assert ping.endswith(b"\n\n") and b"\ndata:" not in ping and b"\nid:" not in ping


async def test_the_labs_get_stream_carries_the_sdks_headers_and_events(
    inproc, redis_client
) -> None:
    server, url = await inproc.server(update_delay_seconds="600", state_scope="shared")
    raw = await subscribed_raw(url, "writer")
    try:
        async with get_stream_in_process(url, str(raw.session_id)) as stream:
            headers = stream.response.headers
            assert headers["content-type"] == "text/event-stream"
            assert headers["mcp-session-id"] == str(raw.session_id)
            assert headers["cache-control"] == "no-cache, no-transform"
            await stream.next()  # the priming event
            mark = server.mark()
            redis_client.publish(CHANNEL, REVIEW_STATUS.uri)
            assert_updated(await stream.next_message())
            await server.await_line(r"\[notification/send\] .*client=writer/", since=mark)
        await server.await_line(r"\[stream/close\] GET .*client=writer/")
        # The ended stream's queue is gone: the session may open another (no 409).
        async with get_stream_in_process(url, str(raw.session_id)) as again:
            await again.next()
    finally:
        await raw.close()
    assert server.matching(r"Traceback|Exception|error in the GET stream") == []


async def test_a_second_get_stream_of_a_session_is_refused_as_the_sdk_does(inproc) -> None:
    _, url = await inproc.server(update_delay_seconds="600")
    raw = await subscribed_raw(url, "twice")
    try:
        async with get_stream_in_process(url, str(raw.session_id)) as stream:
            await stream.next()
            http = http_client(url)
            assert http is not None
            async with http:
                second = await http.get(url, headers=get_headers(str(raw.session_id)))
            assert second.status_code == 409
    finally:
        await raw.close()


