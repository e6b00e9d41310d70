"""The dashboard's feed (services/mcp_lab/server/dashboard_feed.py): one encoded report per
build, shared by every viewer and by ``/api/report``, sent in slices; a viewer that
does not read holds a slice or two in the server, never the report; one that falls two
builds behind is closed; the feed lets the report go when the last viewer leaves; a
long run is built in the report worker, alike.

The server runs in process on the test's real Redis (tests/support/inproc.py). Where
the claim is the server's flow control (what a connection holds), its app is served by
uvicorn on a loopback port in the test's own event loop, and the viewers are plain
sockets. Memory itself is measured by ``scripts/bench_hostile.py dashboard-memory``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from starlette.types import ASGIApp, Message

from mcp_lab import contract, protocol, state
from mcp_lab.evidence import worker
from mcp_lab.evidence.encoded import Encoded
from mcp_lab.evidence.labels import SessionLabels
from mcp_lab.server.dashboard_feed import LOCAL_EVENTS, SLICE_BYTES

pytestmark = pytest.mark.anyio

BOUND = 20.0
_WIDE = "\U0001f600"  # 4 bytes in UTF-8: each event as large as a client makes one


def record_wide_events(redis_client: Any, count: int, client: str) -> None:
    """``count`` events of ``client``, written as the recorder writes them, each with a
    method and a URI at their limits in the widest characters (10 sessions)."""
    sessions = [uuid.uuid4().hex for _ in range(10)]
    pipe = redis_client.pipeline(transaction=False)
    for at in range(count):
        event = contract.Event(
            ts_ms=1_700_000_000_000 + at,
            session=sessions[at % len(sessions)],
            client=client,
            client_version="1.0",
            protocol=protocol.HANDSHAKE_VERSION,
            transport=contract.Transport.STREAMABLE_HTTP,
            direction="in",
            method=_WIDE * 128,
            uri=_WIDE * 512,
            error=-32601,
        )
        pipe.xadd(contract.EVENTS_STREAM, event.fields())
    pipe.execute()


class Call:
    """One GET to an ASGI app, its messages collected as the app sends them; closing it
    is the client going away (``http.disconnect``)."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.messages: list[Message] = []
        self._arrived = asyncio.Event()
        self._gone = asyncio.Event()
        self._asked = False
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "headers": [(b"host", b"127.0.0.1:8089")],
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "server": ("127.0.0.1", 8089),
            "client": ("127.0.0.1", 50000),
            "root_path": "",
            "state": {},
        }
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    async def _receive(self) -> Message:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        self.messages.append(message)
        self._arrived.set()

    @property
    def bodies(self) -> list[Any]:
        return [m["body"] for m in self.messages if m["type"] == "http.response.body"]

    @property
    def headers(self) -> dict[bytes, bytes]:
        start = next(m for m in self.messages if m["type"] == "http.response.start")
        return dict(start["headers"])

    def received(self) -> bytes:
        return b"".join(bytes(body) for body in self.bodies)

    async def until(self, done: Any) -> None:
        """Wait (bounded) until ``done(self)``."""
        with anyio.fail_after(BOUND):
            while not done(self):
                self._arrived.clear()
                await self._arrived.wait()

    async def close(self) -> None:
        self._gone.set()
        with anyio.fail_after(BOUND):
            await self.task


def has_report(call: Call) -> bool:
    text = call.received()
    start = text.find(b"event: report\n")
    return start >= 0 and text.find(b"\n\n", start) >= 0


def report_views(call: Call) -> list[memoryview]:
    """The pieces of the stream's first report (after its ``retry`` line)."""
    return [body for body in call.bodies[1:] if len(body)]


async def test_every_dashboard_and_api_report_send_one_encoding_in_slices(
    inproc, redis_client
) -> None:
    server, _ = await inproc.server()
    record_wide_events(redis_client, 100, "wide")  # a report of about 300 KB
    streams = [Call(server.app, "/api/stream") for _ in range(3)]
    try:
        for stream in streams:
            await stream.until(has_report)
        pieces = [report_views(stream) for stream in streams]
        assert all(len(body) <= SLICE_BYTES for stream in streams for body in stream.bodies)
        # One object, every viewer's pieces views of it: no copy per viewer.
        (shared,) = {id(view.obj) for each in pieces for view in each}
        event = bytes(pieces[0][0].obj)
        assert len(event) > 4 * SLICE_BYTES, len(event)
        assert all(b"".join(bytes(v) for v in each) == event for each in pieces)

        report = Call(server.app, "/api/report")
        with anyio.fail_after(BOUND):
            await report.task
        body = report.received()
        assert int(report.headers[b"content-length"]) == len(body)
        assert all(len(view) <= SLICE_BYTES for view in report.bodies)
        assert {id(view.obj) for view in report.bodies if len(view)} == {shared}
        assert event == b"event: report\ndata: " + body + b"\n\n"
        assert [c["client"] for c in json.loads(body)["clients"]] == ["wide"]
    finally:
        for stream in streams:
            await stream.close()


async def test_the_feed_lets_the_report_go_when_the_last_viewer_leaves(
    inproc, redis_client
) -> None:
    server, _ = await inproc.server()
    record_wide_events(redis_client, 30, "leaving")
    stream = Call(server.app, "/api/stream")
    await stream.until(has_report)
    first = report_views(stream)[0]
    shared = first.obj if isinstance(first, memoryview) else first
    await stream.close()
    for view in report_views(stream):
        if isinstance(view, memoryview):
            view.release()
    del first
    stream.messages.clear()
    gc.collect()  # what only a cycle held is gone; what the server still holds is not
    assert sys.getrefcount(shared) == 2, gc.get_referrers(shared)


@contextlib.asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[tuple[uvicorn.Server, int]]:
    """``app`` (its lifespan already run by the in-process server) served by uvicorn
    on a loopback port, in this event loop. Its connections get a small kernel send
    buffer (inherited from the listening socket): what a client does not read stays in
    the server's own buffers, where the test can see it."""
    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_config=None, http="h11")
    http = uvicorn.Server(config)
    serving = asyncio.create_task(http.serve(sockets=[listening]))
    try:
        with anyio.fail_after(BOUND):
            while not http.started:
                await asyncio.sleep(0.01)
        yield http, port
    finally:
        http.should_exit = True
        with anyio.fail_after(BOUND):
            await serving
        listening.close()


async def viewer(port: int) -> socket.socket:
    """A dashboard stream on a plain socket with a small receive buffer (so the kernel
    takes little of what the server sends it)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(
        sock, f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    )
    return sock


def connection_of(http: uvicorn.Server, sock: socket.socket) -> Any:
    """The server's side of ``sock``'s connection (uvicorn's protocol object)."""
    port = sock.getsockname()[1]
    return next(p for p in http.server_state.connections if p.client and p.client[1] == port)


async def stalled(http: uvicorn.Server, sock: socket.socket) -> Any:
    """Wait (bounded) until the server has stopped writing to ``sock`` (its buffer over
    the high-water mark: the client does not read); its connection."""
    with anyio.fail_after(BOUND):
        while True:
            with contextlib.suppress(StopIteration):
                connection = connection_of(http, sock)
                if connection.flow.write_paused:
                    return connection
            await asyncio.sleep(0.02)


async def test_a_dashboard_that_does_not_read_holds_a_slice_or_two_not_the_report(
    inproc, redis_client
) -> None:
    server, _ = await inproc.server()
    record_wide_events(redis_client, LOCAL_EVENTS - 20, "unread")  # about 500 KB of JSON
    async with served(server.app) as (http, port):
        socks = [await viewer(port) for _ in range(3)]
        try:
            held = [(await stalled(http, sock)).transport.get_write_buffer_size() for sock in socks]
            # A slice written past the high-water mark (64 KiB), with its chunk framing.
            assert all(0 < size <= 2 * SLICE_BYTES + 64 for size in held), held
        finally:
            for sock in socks:
                sock.close()


class Reader:
    """A dashboard stream read as fast as it comes: how many reports arrived."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reports = 0
        self._arrived = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        tail, in_report = b"", False
        while data := await loop.sock_recv(self.sock, 1 << 16):
            text, at = tail + data, 0
            while (found := text.find(b"\n\n" if in_report else b"event: report", at)) >= 0:
                at = found + 2
                if in_report:
                    self.reports += 1
                    self._arrived.set()
                in_report = not in_report
            tail = text[-16:]

    async def until(self, reports: int) -> None:
        with anyio.fail_after(BOUND):
            while self.reports < reports:
                self._arrived.clear()
                await self._arrived.wait()


async def dashboard_streams(port: int) -> int:
    loop = asyncio.get_running_loop()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setblocking(False)
        head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        await loop.sock_sendall(sock, head.encode())
        answer = b""
        while data := await loop.sock_recv(sock, 1 << 16):
            answer += data
    return int(json.loads(answer.split(b"\r\n\r\n", 1)[1])["dashboard_streams"])


async def test_a_dashboard_two_builds_behind_is_closed(inproc, redis_client, caplog) -> None:
    server, _ = await inproc.server()
    record_wide_events(redis_client, LOCAL_EVENTS - 20, "behind")
    async with served(server.app) as (http, port):
        stuck = await viewer(port)
        reading = Reader(await viewer(port))
        try:
            await stalled(http, stuck)  # still sending it the first report
            await reading.until(1)
            assert await dashboard_streams(port) == 2
            for built in (2, 3):  # an event, a build; the stuck stream falls behind
                await asyncio.to_thread(record_wide_events, redis_client, 1, "behind")
                await reading.until(built)
            with anyio.fail_after(BOUND):
                while await dashboard_streams(port) != 1:
                    await asyncio.sleep(0.05)
            assert reading.reports == 3 and not reading.task.done()
            said = [record.getMessage() for record in caplog.records]
            assert any("[dashboard] closed 1 response(s) still sending" in line for line in said)
            assert "ASGI callable returned without completing response." not in said
        finally:
            reading.task.cancel()
            reading.sock.close()
            stuck.close()


def workers_of(pid: int) -> list[int]:
    """The report workers running as children of ``pid``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if b"mcp_lab.evidence.worker" not in cmdline.read_bytes():
                continue
            stat = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == pid:
                found.append(int(cmdline.parent.name))
    return found


@pytest.mark.process
async def test_a_long_run_is_built_in_the_worker_as_it_is_built_here(
    inproc, redis_client, redis_url
) -> None:
    server, _ = await inproc.server()
    record_wide_events(redis_client, LOCAL_EVENTS + 50, "long")
    report = Call(server.app, "/api/report")
    with anyio.fail_after(BOUND):
        await report.task
    (pid,) = workers_of(os.getpid())
    there = json.loads(report.received())

    redis = state.connect(redis_url)
    try:
        labels = SessionLabels()
        await labels.share(redis)  # the server's secret: its labels
        here = await worker.produce(redis, "report", unsaved=0, max_events=20_000, labels=labels)
    finally:
        await redis.aclose()
    assert isinstance(here, Encoded)
    mine = json.loads(bytes(here.json))
    assert {**there, "generated": None} == {**mine, "generated": None}
    assert len(there["clients"][0]["sessions"]) == 10

    # A worker that dies takes no dashboard with it: the next report starts another.
    os.kill(pid, signal.SIGKILL)
    markdown = Call(server.app, "/api/report.md")
    with anyio.fail_after(BOUND):
        await markdown.task
    assert b"## long" in markdown.received()
    (again,) = workers_of(os.getpid())
    assert again != pid
    assert await server.stop() == []
    assert workers_of(os.getpid()) == []  # stopped with its server
