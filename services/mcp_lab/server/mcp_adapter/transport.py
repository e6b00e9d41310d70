"""The adapter's reach into each Streamable HTTP transport the session manager admits:
its event store (keyed by session id) and the priming events it mints (by the
protocol the session negotiated), and its standalone GET stream, served by the lab's
own writer (:mod:`mcp_lab.server.get_writer`) instead of the SDK's (see the package's
docstring, :mod:`mcp_lab.server.mcp_adapter`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.streamable_http import (
    CONTENT_TYPE_SSE,
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.types import Send

from mcp_lab import sse
from mcp_lab.server import get_writer
from mcp_lab.server.mcp_adapter.manager import adjust_admitted

logger = logging.getLogger("mcp_lab.server")


def bind_session_event_stores(
    app: Starlette,
    make_store: Callable[[str], EventStore],
    protocol_of: Callable[[str], str | None],
) -> None:
    """Give every Streamable HTTP session of ``app`` the event store ``make_store(session_id)``,
    and prime its streams by the protocol it negotiated.

    FastMCP hands each session a store that knows only a random prefix, not the
    ``Mcp-Session-Id``; the lab keys what it stores by session id, so that any
    replica can find a session's events. The session manager exists only while
    the app's lifespan runs, so the binding is made when it starts.

    The SDK decides whether a POST response (or a resumed stream) starts with a
    data-less priming event from the request's ``MCP-Protocol-Version`` header
    (2025-03-26 when absent). The lab decides it from ``protocol_of(session_id)``,
    the version the session negotiated, once ``initialize`` has been handled
    (before that, from the version ``initialize`` asks for, as the SDK does).
    """

    def with_store(transport: Any) -> None:
        if transport.mcp_session_id:
            session_id = str(transport.mcp_session_id)
            transport._event_store = make_store(session_id)
            _prime_by_session(transport, lambda: protocol_of(session_id))

    adjust_admitted(app, with_store)


def _prime_by_session(transport: Any, negotiated: Callable[[], str | None]) -> None:
    """Make ``transport`` mint priming events by the session's negotiated protocol."""
    mint = transport._mint_priming_event

    async def mint_for_session(stream_id: str, protocol_version: str) -> Any:
        return await mint(stream_id, negotiated() or protocol_version)

    transport._mint_priming_event = mint_for_session


def write_get_streams(app: Starlette, closing: asyncio.Event) -> None:
    """Serve each session's standalone GET stream with the lab's own writer
    (:func:`mcp_lab.server.get_writer.serve`) instead of the SDK's sse-starlette
    response; ``closing``, once set, ends every such stream (the server stops).

    Only a GET the SDK would open a stream for: one with ``Last-Event-ID`` (a
    replay), without ``text/event-stream`` in its ``Accept`` (406) or while the
    session's stream is open (409) goes to the SDK's own ``_handle_get_request``,
    as does everything its ``_validate_request_headers`` refuses. The stream is the
    SDK's: its queue ``_request_streams[GET_STREAM_KEY]`` (made as the SDK makes it,
    before the 200 is sent, and cleaned up with ``_clean_up_memory_streams``), each
    event as its ``_create_event_data`` makes it, its headers."""
    adjust_admitted(app, lambda transport: _write_get_stream(transport, closing))


def _write_get_stream(transport: StreamableHTTPServerTransport, closing: asyncio.Event) -> None:
    """Make ``transport`` serve its standalone GET stream with the lab's writer."""
    handle = transport._handle_get_request

    def event_of(message: EventMessage) -> bytes:
        data = transport._create_event_data(message)
        return sse.frame(data["data"], event=data["event"], event_id=data.get("id"))

    async def handle_get(request: Request, send: Send) -> None:
        if (
            request.headers.get(LAST_EVENT_ID_HEADER)
            or not check_accept_headers(request)[1]
            or GET_STREAM_KEY in transport._request_streams
        ):
            await handle(request, send)
            return
        if not await transport._validate_request_headers(request, send):
            return
        transport._request_streams[GET_STREAM_KEY] = anyio.create_memory_object_stream[
            EventMessage
        ](REQUEST_STREAM_BUFFER_SIZE)
        headers = [
            (b"content-type", CONTENT_TYPE_SSE.encode()),
            (b"cache-control", b"no-cache, no-transform"),
            (b"connection", b"keep-alive"),
            (b"x-accel-buffering", b"no"),
        ]
        if transport.mcp_session_id:
            headers.append((MCP_SESSION_ID_HEADER.encode(), transport.mcp_session_id.encode()))
        try:
            await get_writer.serve(
                transport._request_streams[GET_STREAM_KEY][1],
                request.receive,
                send,
                headers=headers,
                event_of=event_of,
                closing=closing,
            )
        except Exception:
            session = transport.mcp_session_id
            logger.exception("[lab] error in the GET stream of session=%s", session)
        finally:
            await transport._clean_up_memory_streams(GET_STREAM_KEY)

    # mypy refuses assigning to a method; replacing it is the point here.
    transport._handle_get_request = handle_get  # type: ignore[method-assign]
