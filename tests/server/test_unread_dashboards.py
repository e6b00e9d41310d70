"""Dashboards that never read (issue 44, item 1): the server closes their connections
at the socket, not only their streams, and counts them against the stream cap until
they are gone; a normal viewer is served meanwhile and after.

A stream the feed closes for being two builds behind aborts its connection
(services/mcp_lab/server/dashboard_feed.py); a connection whose writing stays stalled
past the write deadline is aborted by the lab's protocol
(services/mcp_lab/server/connections.py). Before, uvicorn "closed" such a connection,
which waited for the client to read what was written: a client that never read held
its socket (and the kernel's send buffer) for as long as it stayed connected, while
its stream no longer counted against ``MCP_TEST_DASHBOARD_MAX_STREAMS``.

The lab's app is served by uvicorn with the lab's protocol class, on a loopback port in
the test's event loop (its connections with a small kernel send buffer, so that what a
client does not read stays where the test sees it); the viewers are plain sockets with
a small receive buffer that never read. What the kernel holds for 200 of them is
measured by ``scripts/bench_unread_dashboards.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_lab.server.connections import ConnectionGuard, protocol_class
from mcp_lab.server.dashboard_feed import LOCAL_EVENTS, DashboardFeed
from tests.server.test_dashboard_feed import (
    BOUND,
    Reader,
    dashboard_streams,
    record_wide_events,
    stalled,
    viewer,
)

pytestmark = pytest.mark.anyio

UNREAD = 30


@contextlib.asynccontextmanager
async def served(app: ASGIApp, guard: ConnectionGuard) -> AsyncIterator[tuple[uvicorn.Server, int]]:
    """``app`` served by uvicorn under ``guard`` (the lab's protocol class), its
    connections with a 16 KiB kernel send buffer (inherited from the listening socket)."""
    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    config = uvicorn.Config(
        app, lifespan="off", log_config=None, log_level="warning", http=protocol_class(guard)
    )
    http = uvicorn.Server(config)
    serving = asyncio.create_task(http.serve(sockets=[listening]))
    try:
        with anyio.fail_after(BOUND):
            while not http.started:
                assert not serving.done(), "uvicorn did not start"
                await asyncio.sleep(0.01)
        yield http, port
    finally:
        http.should_exit = True
        with anyio.fail_after(BOUND):
            await serving
        listening.close()


def open_of(http: uvicorn.Server, socks: list[socket.socket]) -> int:
    """How many of ``socks``' connections the server still holds."""
    ports = {sock.getsockname()[1] for sock in socks}
    clients = [getattr(p, "client", None) for p in http.server_state.connections]
    return sum(1 for client in clients if client and client[1] in ports)


def files_open() -> int:
    return len(os.listdir("/proc/self/fd"))


async def until_closed(http: uvicorn.Server, socks: list[socket.socket]) -> None:
    """Wait (bounded) until the server holds none of ``socks``' connections."""
    with anyio.fail_after(BOUND):
        while open_of(http, socks):
            await asyncio.sleep(0.05)


async def test_dashboards_dropped_behind_are_closed_at_the_socket_and_counted_till_gone(
    inproc, redis_client, monkeypatch
) -> None:
    server, _ = await inproc.server()
    record_wide_events(redis_client, LOCAL_EVENTS - 20, "unread")  # about 500 KB of JSON
    # A write deadline no test reaches: only the feed closes the unread streams here.
    guard = ConnectionGuard(4 * UNREAD, 60.0, write_timeout=600.0)
    async with served(server.app, guard) as (http, port):
        leaving: list[tuple[int, int]] = []  # (streams counted after, unread still open)
        real_leave = DashboardFeed.leave

        def leave(feed: DashboardFeed) -> None:
            real_leave(feed)
            leaving.append((feed.streams, open_of(http, unread)))

        unread = [await viewer(port) for _ in range(UNREAD)]
        reading = Reader(await viewer(port))
        try:
            for sock in unread:
                await stalled(http, sock)  # each still sending the first report
            await reading.until(1)
            assert await dashboard_streams(port) == UNREAD + 1
            held = files_open()
            monkeypatch.setattr(DashboardFeed, "leave", leave)
            for built in (2, 3):  # an event, a build: the unread streams fall behind
                await asyncio.to_thread(record_wide_events, redis_client, 1, "unread")
                await reading.until(built)
            await until_closed(http, unread)
            # Closed at the socket: the server's files for them are gone.
            assert files_open() <= held - UNREAD, (files_open(), held)
            assert guard.abandoned == 0  # the feed aborted them itself, not uvicorn's close
            # Each left the count only once its connection was gone (the reader's stays).
            assert len(leaving) == UNREAD, leaving
            assert all(counted >= still_open + 1 for counted, still_open in leaving), leaving
            assert await dashboard_streams(port) == 1
            assert not reading.task.done()
            fresh = Reader(await viewer(port))
            try:
                await fresh.until(1)
            finally:
                fresh.task.cancel()
                fresh.sock.close()
        finally:
            reading.task.cancel()
            reading.sock.close()
            for sock in unread:
                sock.close()


async def test_a_dashboard_that_reads_nothing_meets_the_write_deadline(
    inproc, redis_client
) -> None:
    """No build comes (nothing puts a stream behind): the write deadline closes them."""
    server, _ = await inproc.server()
    record_wide_events(redis_client, LOCAL_EVENTS - 20, "unread")
    guard = ConnectionGuard(64, 60.0, write_timeout=1.0)
    async with served(server.app, guard) as (http, port):
        unread = [await viewer(port) for _ in range(5)]
        try:
            for sock in unread:
                await stalled(http, sock)
            await until_closed(http, unread)
            assert guard.write_stalled == 5
            with anyio.fail_after(BOUND):
                while await dashboard_streams(port):
                    await asyncio.sleep(0.05)
            for sock in unread:  # reset, not closed in order: what was unread is dropped
                with pytest.raises(ConnectionResetError):
                    while sock.recv(1 << 16):
                        pass
            fresh = Reader(await viewer(port))
            try:
                await fresh.until(1)
            finally:
                fresh.task.cancel()
                fresh.sock.close()
        finally:
            for sock in unread:
                sock.close()


async def unfinished(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that gives up on its response: a head and 4 MB of body (written at once:
    its connection's writing is not paused yet), then it returns."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"x" * (4 << 20), "more_body": True})


async def test_a_response_given_up_on_is_aborted_at_once(caplog) -> None:
    """Not only the dashboard's: any response whose app returned unfinished, with bytes
    its client has not read, is aborted (uvicorn's close waited for the client)."""
    guard = ConnectionGuard(8, 60.0, write_timeout=600.0)
    async with served(unfinished, guard) as (http, port):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(sock, ("127.0.0.1", port))
            head = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
            await loop.sock_sendall(sock, head.encode())
            with anyio.fail_after(BOUND):
                while not guard.abandoned:  # its app returned, the connection aborted
                    await asyncio.sleep(0.02)
            await until_closed(http, [sock])
            assert guard.abandoned == 1 and guard.write_stalled == 0
            with pytest.raises(ConnectionResetError):
                while sock.recv(1 << 20):
                    pass
        finally:
            sock.close()
