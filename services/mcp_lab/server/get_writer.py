"""A session's standalone GET stream, written by the lab.

The SDK writes a GET stream through sse-starlette: each message goes from the
stream's queue to a writer task, through a second memory stream to the
response's task, then through a send lock to the socket, with five tasks per
stream. In a fan-out to 1,000 sessions that path was most of the time from the
publish to the last notification (docs/performance.md, "Fan-out"). Here one loop
takes each message off the queue and sends it as one SSE event, beside two small
tasks: one waits for the client to leave, one pings every :data:`PING_SECONDS`
(as sse-starlette does, so that proxies and clients with read timeouts keep the
stream) and ends the stream when the server shuts down.

The SDK's private parts (its queue, its header checks, its event data) stay in
:mod:`mcp_lab.server.mcp_adapter`, which hands them to :func:`serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.types import Receive, Send

from mcp_lab import sse

T = TypeVar("T")

# sse-starlette's default interval between keep-alive comments.
PING_SECONDS = 15.0


async def serve(
    queue: MemoryObjectReceiveStream[T],
    receive: Receive,
    send: Send,
    *,
    headers: list[tuple[bytes, bytes]],
    event_of: Callable[[T], bytes],
    closing: asyncio.Event,
    ping_seconds: float = PING_SECONDS,
) -> None:
    """Answer 200 with ``headers``, then send ``event_of(item)`` for each item of
    ``queue`` until it is closed (the session ended: the body is ended too), the
    client disconnects, or ``closing`` is set (the server stops: the body is ended)."""
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    left = False
    async with anyio.create_task_group() as tasks:

        async def until_disconnect() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = True
            tasks.cancel_scope.cancel()

        async def ping_until_closing() -> None:
            while True:
                with anyio.move_on_after(ping_seconds):
                    await closing.wait()
                if closing.is_set():
                    tasks.cancel_scope.cancel()
                    return
                # A whole event per send: it cannot land inside one of the loop's.
                ping = sse.frame(comment=f"ping - {datetime.now(UTC)}")
                await send({"type": "http.response.body", "body": ping, "more_body": True})

        tasks.start_soon(until_disconnect)
        tasks.start_soon(ping_until_closing)
        try:
            async with queue:
                async for item in queue:
                    body = event_of(item)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
        except anyio.ClosedResourceError:
            pass  # the session ended: the SDK closes the queue under a waiting reader
        tasks.cancel_scope.cancel()
    if not left:
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
