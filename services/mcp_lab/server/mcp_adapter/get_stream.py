"""The adapter's reach into a Streamable HTTP session for a fan-out
(:mod:`mcp_lab.server.fanout`): :class:`GetStream`, the session's event store and
standalone GET stream queue, written to directly as the SDK's message router would,
and :func:`get_stream_of`, which finds it only where that is safe (see the package's
docstring, :mod:`mcp_lab.server.mcp_adapter`).
"""

from __future__ import annotations

from typing import Any

from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.session import ServerSession
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from mcp_lab.server.mcp_adapter.manager import HttpSessions


class GetStream:
    """The standalone GET stream of one Streamable HTTP session, written to without
    going through the session's write stream.

    ``ServerSession.send_notification`` dumps a pydantic notification, builds a
    JSON-RPC message, and hands it through the session's write stream to the
    transport's message router, which stores it in the session's event store
    and then puts ``EventMessage(message, event_id)`` on the GET stream's queue
    (``transport._request_streams[GET_STREAM_KEY]``) if that stream is open. A
    fan-out does the router's two steps itself, for many sessions at once, with
    one prepared message: the same store, the same queue, the same SSE event.
    Only for a session served in loop mode by a ``JSONRPCDispatcher`` whose write
    stream is this transport's (checked in :func:`get_stream_of`).
    """

    __slots__ = ("_dispatcher", "_transport")

    def __init__(self, transport: StreamableHTTPServerTransport, dispatcher: Any) -> None:
        self._transport = transport
        self._dispatcher = dispatcher

    @property
    def usable(self) -> bool:
        """Whether the session still takes messages (the SDK would not drop them)."""
        return not self._transport.is_terminated and not self._dispatcher._closed

    @property
    def event_store(self) -> EventStore | None:
        """The session's event store (None: not resumable)."""
        store: EventStore | None = self._transport._event_store
        return store

    def queue(self) -> MemoryObjectSendStream[EventMessage] | None:
        """The open GET stream's queue (None: no GET stream open now)."""
        pair = self._transport._request_streams.get(GET_STREAM_KEY)
        return None if pair is None else pair[0]


def get_stream_of(sessions: HttpSessions, session: ServerSession) -> GetStream | None:
    """The :class:`GetStream` of the Streamable HTTP session behind ``session``, or
    None when its notifications must go through the SDK (another transport, the
    2026 era's notify-only channel, a session the manager no longer holds)."""
    manager = sessions._manager
    session_id = session._connection.session_id
    if manager is None or not session_id:
        return None
    transport = manager._server_instances.get(str(session_id))
    outbound = session._connection.outbound
    if not isinstance(transport, StreamableHTTPServerTransport) or not isinstance(
        outbound, JSONRPCDispatcher
    ):
        return None
    if outbound._write_stream is not transport._write_stream:
        return None
    return GetStream(transport, outbound)
