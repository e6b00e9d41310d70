"""The server's connections on a real socket (services/mcp_lab/server/connections.py): uvicorn in
the test's event loop with the lab's protocol class, serving an in-process lab (its
guarded app, on the test's Redis), and clients speaking over loopback.

What is claimed here is the connection cap against slow request *bodies*: a connection
whose body is still coming waits, as one still sending its head does, so a new
connection takes its place at the cap; and the guard's body deadline answers 408 and
closes. The cap against slow heads at a real open-file limit, in a process of its
own, is tests/system/test_hostile.py's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import h11
import pytest
import uvicorn

from mcp_lab.server.connections import ConnectionGuard, protocol_class
from tests.support.inproc import InProcServer, _in_context
from tests.support.lab import STATUS_URI

pytestmark = pytest.mark.anyio

SLOW = 16  # the cap, and the slow connections that fill it
LONG = 60.0  # head and body deadlines long enough that only the cap can free a place


@asynccontextmanager
async def served(server: InProcServer, cap: int) -> AsyncIterator[uvicorn.Server]:
    """``server``'s app on its port, under a connection cap of ``cap`` (as
    ``mcp_lab.server.run`` serves it, without the lifespan the in-process lab runs)."""
    config = uvicorn.Config(
        server.app,
        host="127.0.0.1",
        port=server.settings.port,
        lifespan="off",
        log_config=None,
        log_level="warning",
        timeout_keep_alive=5,
        http=protocol_class(ConnectionGuard(cap, server.settings.head_timeout_seconds)),
    )
    http = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(http.serve(), context=_in_context(server))
    try:
        with anyio.fail_after(10):
            while not http.started:
                assert not task.done(), "uvicorn did not start"
                await anyio.sleep(0.01)
        yield http
    finally:
        http.should_exit = True
        with anyio.fail_after(10):
            await task


async def slow_body(port: int, stop: anyio.Event, closed: list[bytes]) -> None:
    """A POST to /mcp whose head says 1,000 bytes of body, then one byte a second;
    notes in ``closed`` what the server sent before it closed the connection."""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{"
    ).encode()
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        answer = b""
        try:
            await stream.send(head)
            while not stop.is_set():
                with anyio.move_on_after(1):
                    data = await stream.receive()
                    answer += data
                    continue
                await stream.send(b" ")
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
            closed.append(answer)


class SlowSenders:
    """Slow-body connections (:func:`slow_body`) that keep the cap full: whenever the
    server closed some, :meth:`fill` opens as many new ones."""

    def __init__(self, port: int, tasks: anyio.abc.TaskGroup) -> None:
        self.port = port
        self.tasks = tasks
        self.stop = anyio.Event()
        self.closed: list[bytes] = []  # what the server sent each before closing it
        self.started = 0

    async def fill(self, http: uvicorn.Server, count: int) -> None:
        """Until ``count`` connections are open with their request head in and their
        body still coming (opening new ones for those closed); bounded."""
        with anyio.fail_after(10):
            while True:
                for _ in range(count - (self.started - len(self.closed))):
                    self.tasks.start_soon(slow_body, self.port, self.stop, self.closed)
                    self.started += 1
                open_now = list(http.server_state.connections)
                coming = [c for c in open_now if c.conn.their_state is h11.SEND_BODY]
                if len(coming) >= count:
                    return
                await anyio.sleep(0.02)


async def normal_flow(url: str) -> str:
    """A client as any would be (the mcp SDK over Streamable HTTP): initialize, list,
    read; the first line of what it read."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_resources()
            result = await session.read_resource(STATUS_URI)
    return str(result.contents[0].text).splitlines()[0]  # type: ignore[union-attr]


async def test_connections_sending_their_body_slowly_cannot_hold_the_cap(inproc) -> None:
    """As many connections as the cap, each with its head in and its body coming a
    byte a second (no deadline near): a normal client is served every time, each of
    its connections taking the place of the slow one that waited longest."""
    server, url = await inproc.server(
        head_timeout_seconds=str(LONG), body_timeout_seconds=str(LONG)
    )
    port = server.settings.port
    async with served(server, SLOW) as http:
        guard = http.config.http_protocol_class.guard  # type: ignore[attr-defined]
        async with anyio.create_task_group() as tasks:
            slow = SlowSenders(port, tasks)
            served_ = []
            for _ in range(3):
                await slow.fill(http, SLOW)  # the cap full of slow bodies again
                with anyio.fail_after(15):
                    served_.append(await normal_flow(url))
            slow.stop.set()
        assert served_ == ["status: pending"] * 3
        assert guard.refused == 0, "a new connection was refused: every open one was busy"
        assert guard.evicted >= 3
        closed = slow.closed
        assert len(closed) >= 3 and all(answer == b"" for answer in closed), closed
    await server.await_line(
        r"\[lab\] connections: closed the connection that waited longest for its request "
        r"head or body"
    )


async def test_a_body_that_does_not_come_in_time_gets_408_and_its_connection_closed(
    inproc,
) -> None:
    server, url = await inproc.server(body_timeout_seconds="0.5")
    port = server.settings.port
    async with served(server, SLOW):
        stop = anyio.Event()
        closed: list[bytes] = []
        with anyio.fail_after(10):
            await slow_body(port, stop, closed)  # returns once the server closed it
        (answer,) = closed
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"\r\nconnection: close\r\n" in answer.lower()
        assert answer.endswith(b'{"error": "request body not received within 0.5 s"}')
        with anyio.fail_after(15):
            assert await normal_flow(url) == "status: pending"
    await server.await_line(
        r"\[guard\] POST /mcp: body not all here 0\.5 s after its head \(\d+ bytes, "
        r"Content-Length 1000\): 408, connection closed"
    )
