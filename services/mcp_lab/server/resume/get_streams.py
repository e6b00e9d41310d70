"""Which GET of a session is its notification stream, and when it opens and closes.

A notification can only reach a Streamable HTTP client while its standalone GET
stream is open (the SDK drops it otherwise, silently), so the log and the
evidence must show both ends, and only of that stream. A GET without
``Last-Event-ID`` is the standalone stream. A GET with one resumes the stream
that event was sent on: the standalone stream (then it carries notifications
again), or a POST response stream (TypeScript-SDK clients reopen those on their
own); the event store reports which, through :func:`report_resumed_stream`.
Only the standalone stream makes the session count as reachable.

The evidence record gets ``stream/open``, ``stream/resume`` (a GET that resumes
a POST response stream), ``stream/close``, and ``stream/priming`` (out: an event
without data was written on the stream), for sessions held here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

import anyio
from mcp.server.streamable_http import GET_STREAM_KEY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_lab import protocol
from mcp_lab.contract import Peer
from mcp_lab.logs import event
from mcp_lab.server.sessions import SessionRegistry

_LAST_EVENT_HEADER = b"last-event-id"
_CLOSE_RECORD_SECONDS = 2.0

# Records one stream event: (peer, direction, method).
RecordStream = Callable[[Peer, str, str], Awaitable[None]]
_OnResumed = Callable[[str | None], Awaitable[None]]

# The GET being served, told which stream its Last-Event-ID resumed.
_resumed: ContextVar[_OnResumed | None] = ContextVar("mcp_lab_resumed_stream", default=None)


async def report_resumed_stream(stream: str | None) -> None:
    """Tell the GET being served which stream its ``Last-Event-ID`` resumed
    (``None``: none, nothing will be sent on it). Called by whoever replays."""
    on_resumed = _resumed.get()
    if on_resumed is not None:
        await on_resumed(stream)


def stream_request(headers: dict[bytes, bytes]) -> tuple[str, str]:
    """The ``Mcp-Session-Id`` and ``Last-Event-ID`` of a GET stream request ("" when
    absent); ``headers``: ``dict(scope["headers"])``."""
    session = headers.get(protocol.SESSION_HEADER_BYTES, b"").decode("latin-1")
    return session, headers.get(_LAST_EVENT_HEADER, b"").decode("latin-1")


def has_dataless_event(body: bytes) -> bool:
    """Whether SSE text ``body`` holds an event (not a comment) without data."""
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        fields = [line for line in block.split(b"\n") if line and not line.startswith(b":")]
        if not fields:
            continue
        data = [line[5:].strip() for line in fields if line.startswith(b"data:")]
        if not any(data):
            return True
    return False


# Serves one GET stream request: (scope, receive, send, session id, Last-Event-ID).
ServeGet = Callable[[Scope, Receive, Send, str, str], Awaitable[None]]


def plain(app: ASGIApp) -> ServeGet:
    """``app`` serving GET streams (it reads the headers itself)."""

    async def serve(scope: Scope, receive: Receive, send: Send, _session: str, _last: str) -> None:
        await app(scope, receive, send)

    return serve


class StreamLog:
    """GET of the MCP path (the front door, ``mcp_lab.server.asgi``, sends only
    those here): marks the session's notification stream open and closed, logs
    ``[stream/open]``, ``[stream/resume]`` and ``[stream/close]``, and records them."""

    def __init__(
        self,
        app: ServeGet,
        registry: SessionRegistry,
        record: RecordStream | None = None,
    ) -> None:
        self._app = app
        self._registry = registry
        self._record = record

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, session: str, last_event_id: str
    ) -> None:
        """Serve one GET with ``session`` and ``last_event_id`` ("" when absent)."""
        resuming = bool(last_event_id)
        known = self._registry.peer(session) if session else None
        # Only sessions held here are recorded: their peer (client, protocol) is known.
        record = self._record if known is not None else None
        stream = _Stream(self._registry, known or Peer(session=session or "-"), record)

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                started = message["status"] == 200
                if started and not resuming:
                    stream.open("GET")
                await send(message)
                if stream.opened:
                    await stream.evidence("in", protocol.STREAM_OPEN)
                return
            body = message.get("body", b"")
            primed = stream.opened and not stream.primed and has_dataless_event(body)
            await send(message)
            if primed:
                stream.primed = True
                await stream.evidence("out", protocol.STREAM_PRIMING)

        async def on_resumed(resumed: str | None) -> None:
            if resumed == GET_STREAM_KEY:
                stream.open("GET resumed")
                await stream.evidence("in", protocol.STREAM_OPEN)
            else:
                detail = (
                    f"GET resumes a POST response stream (stream={resumed})"
                    if resumed
                    else "GET with a Last-Event-ID that resumes nothing"
                )
                event(protocol.STREAM_RESUME, detail, stream.peer)
                await stream.evidence("in", protocol.STREAM_RESUME)

        token = _resumed.set(on_resumed)
        try:
            await self._app(scope, receive, watch, session, last_event_id)
        finally:
            _resumed.reset(token)
            if stream.opened:
                self._registry.stream_closed(stream.peer.session)
                event(protocol.STREAM_CLOSE, "GET", stream.peer)
                # Recorded even when the request is being cancelled, within a bound.
                with anyio.move_on_after(_CLOSE_RECORD_SECONDS, shield=True):
                    await stream.evidence("in", protocol.STREAM_CLOSE)


class _Stream:
    """One GET being served: whether it is the session's notification stream."""

    def __init__(self, registry: SessionRegistry, peer: Peer, record: RecordStream | None) -> None:
        self._registry = registry
        self.peer = peer
        self._record = record
        self.opened = False
        self.primed = False

    def open(self, how: str) -> None:
        if self.opened:
            return
        self.opened = True
        self._registry.stream_opened(self.peer.session)
        event(protocol.STREAM_OPEN, how, self.peer)

    async def evidence(self, direction: str, method: str) -> None:
        if self._record is not None:
            await self._record(self.peer, direction, method)
