"""The server's connections on a real socket (services/mcp_lab/server/connections.py): uvicorn in
the test's event loop with the lab's protocol class, serving an in-process lab (its
guarded app, on the test's Redis), and clients speaking over loopback.

What is claimed here is what the connection cap closes: a connection that has not sent
a whole request yet (its head or its body still coming), the slowest first (one that
stalled after its first bytes, else the one quiet longest), so a new connection takes
its place at the cap; never a connection that has sent one, not even a
keep-alive connection idle between its requests while slow senders reconnect the moment
they are closed; a newcomer only when every open one has sent a whole request. And the
guard's body deadline answers 408 and closes. The cap against slow heads at a real
open-file limit, in a process of its own, is tests/system/test_hostile.py's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import h11
import pytest
import uvicorn

from mcp_lab.server.connections import ConnectionGuard, GuardedProtocol, protocol_class
from tests.support.inproc import InProcServer, _in_context
from tests.support.lab import STATUS_URI

pytestmark = pytest.mark.anyio

SLOW = 16  # the cap, and the slow connections that fill it
LONG = 60.0  # head and body deadlines long enough that only the cap can free a place


class WatchedGuard(ConnectionGuard):
    """A :class:`ConnectionGuard` that tells when it has closed so many connections
    for room (:meth:`closed_for_room`)."""

    def __init__(self, max_connections: int, head_timeout: float) -> None:
        super().__init__(max_connections, head_timeout)
        self._wanted = 0
        self._reached = anyio.Event()

    def admit(self, connection: GuardedProtocol, open_now: int) -> bool:
        admitted = super().admit(connection, open_now)
        if self.evicted >= self._wanted:
            self._reached.set()
        return admitted

    async def closed_for_room(self, more: int) -> None:
        """Until ``more`` connections more have been closed for room (bounded)."""
        self._wanted = self.evicted + more
        self._reached = anyio.Event()
        with anyio.fail_after(10):
            await self._reached.wait()


@asynccontextmanager
async def served(
    server: InProcServer, cap: int, guard: ConnectionGuard | None = None
) -> AsyncIterator[uvicorn.Server]:
    """``server``'s app on its port, under a connection cap of ``cap`` (as
    ``mcp_lab.server.run`` serves it, without the lifespan the in-process lab runs),
    or under ``guard``."""
    guard = guard or ConnectionGuard(cap, server.settings.head_timeout_seconds)
    config = uvicorn.Config(
        server.app,
        host="127.0.0.1",
        port=server.settings.port,
        lifespan="off",
        log_config=None,
        log_level="warning",
        timeout_keep_alive=5,
        http=protocol_class(guard),
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
    its connections taking the place of a slow one."""
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
        r"\[lab\] connections: closed the slowest connection without a whole request, "
        r"for room"
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


class Stub:
    """A connection as :class:`ConnectionGuard` sees it: it can be closed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return self.name


def test_the_cap_closes_the_slowest_connection_without_a_whole_request_never_a_proven_one() -> None:
    """At the cap: a new connection that has stalled (its first bytes came, no more),
    else the one quiet longest (since it opened, or since more bytes came); never a
    proven one (a request of it came whole); the newcomer only when every open one
    is proven."""
    guard = ConnectionGuard(3, LONG)
    a, b, c, d, e, f, g = (Stub(name) for name in "abcdefg")
    for at, stub in enumerate((a, b, c)):
        assert guard.admit(stub, at)  # type: ignore[arg-type]
    guard.proven(a)  # type: ignore[arg-type]  # the oldest, and kept: its request came whole
    guard.heard(c, first=True)  # type: ignore[arg-type]  # part of a request, then nothing
    assert guard.admit(d, 3)  # type: ignore[arg-type]
    assert [s for s in (a, b, c) if s.closed] == [c]  # stalled, before b that sent nothing
    guard.closed(c)  # type: ignore[arg-type]
    guard.heard(b, first=True)  # type: ignore[arg-type]
    guard.heard(b, first=False)  # type: ignore[arg-type]  # more came: moving, not stalled
    assert guard.admit(e, 3)  # type: ignore[arg-type]
    assert [s for s in (a, b, d) if s.closed] == [d]  # quiet since it opened, before b's bytes
    guard.closed(d)  # type: ignore[arg-type]
    assert guard.admit(f, 3)  # type: ignore[arg-type]
    assert [s for s in (a, b, e) if s.closed] == [b]  # quiet since before e opened
    guard.closed(b)  # type: ignore[arg-type]
    guard.proven(e)  # type: ignore[arg-type]
    guard.proven(f)  # type: ignore[arg-type]
    assert not guard.admit(g, 3)  # type: ignore[arg-type]  # every open one proven: g refused
    assert not any(stub.closed for stub in (a, e, f, g))
    assert (guard.evicted, guard.refused) == (3, 1)


async def reconnecting_slow_sender(port: int, partial: bool) -> None:
    """Opens a connection, sends nothing (or, when ``partial``, the first line of a
    request head), and once the server closed it opens another at once; until cancelled."""
    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
    while True:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            continue  # refused by the kernel (its backlog full): again at once
        async with stream:
            try:
                if partial:
                    await stream.send(head)
                while await stream.receive():
                    pass
            except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                pass  # closed by the server: again


async def keep_alive_answer(stream: anyio.abc.ByteStream, port: int) -> bool:
    """One ``GET /healthz`` on ``stream``, kept alive: True when a whole 200 came back."""
    await stream.send(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    answer = b""
    with anyio.fail_after(5):
        while b"\r\n\r\n" not in answer:
            answer += await stream.receive()
        head, _, body = answer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += await stream.receive()
    return head.startswith(b"HTTP/1.1 200 ")


async def test_a_keep_alive_connection_outlasts_slow_senders_that_reconnect_at_once(
    inproc,
) -> None:
    """Three times the cap of slow senders (half sending nothing, half part of a head),
    each reconnecting the moment it is closed: a normal client's one keep-alive
    connection, served once before they came, is served 8 of 8 times, each request
    sent after the cap has closed more connections than it holds (the whole line of
    those waiting for a head has turned over). Before, the idle keep-alive waited in
    that line and was closed for room."""
    server, _ = await inproc.server(head_timeout_seconds=str(LONG))
    port = server.settings.port
    guard = WatchedGuard(SLOW, LONG)
    async with served(server, SLOW, guard):
        async with await anyio.connect_tcp("127.0.0.1", port) as client:
            assert await keep_alive_answer(client, port)  # proven, before the slow senders
            served_ = 0
            async with anyio.create_task_group() as tasks:
                for at in range(3 * SLOW):
                    tasks.start_soon(reconnecting_slow_sender, port, bool(at % 2))
                for _ in range(8):
                    await guard.closed_for_room(SLOW + 1)
                    try:
                        served_ += await keep_alive_answer(client, port)
                    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                        break  # the server closed it
                tasks.cancel_scope.cancel()
        assert served_ == 8, f"the keep-alive connection was served {served_} of 8 times"
        assert guard.refused == 0
