"""Every use of fastmcp's or mcp's private attributes, in one place.

FastMCP 4 has no public API for ``resources/subscribe``, for withdrawing the
capabilities it always advertises, or for learning when a client session ends.
The low-level server and the per-session ``Connection`` have them; this module
reaches them, so an upgrade of fastmcp or mcp breaks here and nowhere else.
Checked against fastmcp 4.2.3 and mcp 2.3.0.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.http import StreamableHTTPASGIApp
from mcp.server.context import ServerMiddleware
from mcp.server.session import ServerSession
from mcp.server.streamable_http import EventStore
from pydantic import BaseModel
from starlette.applications import Starlette


def register_request_handler(
    server: FastMCP,
    method: str,
    params_type: type[BaseModel],
    handler: Callable[[Any, Any], Awaitable[Any]],
) -> None:
    """Serve ``method`` with ``handler(ctx, params)`` on the low-level server.

    The low-level server derives ``resources.subscribe`` in the initialize
    result from the presence of a ``resources/subscribe`` handler.
    """
    server._mcp_server.add_request_handler(method, params_type, handler)


def withdraw_request_handlers(server: FastMCP, methods: Iterable[str]) -> None:
    """Stop serving ``methods``; their capabilities are no longer advertised."""
    for method in methods:
        server._mcp_server._request_handlers.pop(method, None)


def on_session_end(session: ServerSession, callback: Callable[[], Awaitable[None]]) -> None:
    """Run ``callback`` once when the client session behind ``session`` ends."""
    session._connection.exit_stack.push_async_callback(callback)


_SESSION_KEY = "mcp_lab_session_id"


def session_key(session: ServerSession) -> str:
    """A stable id of the client session behind ``session``.

    The ``Mcp-Session-Id`` on stateful Streamable HTTP; on transports without one
    (legacy SSE, stdio) an id minted once per session and kept on its connection.
    """
    connection = session._connection
    if connection.session_id:
        return str(connection.session_id)
    state = connection.state
    if _SESSION_KEY not in state:
        state[_SESSION_KEY] = uuid.uuid4().hex
    return str(state[_SESSION_KEY])


def add_inbound_middleware(server: FastMCP, middleware: ServerMiddleware[Any]) -> None:
    """Run ``middleware(ctx, call_next)`` on every inbound JSON-RPC message.

    It sees requests, notifications, ``initialize`` and unknown methods, with raw
    params, before FastMCP's own dispatch.
    """
    server._mcp_server.middleware.insert(0, middleware)


def bind_session_event_stores(app: Starlette, make_store: Callable[[str], EventStore]) -> None:
    """Give every Streamable HTTP session of ``app`` the event store ``make_store(session_id)``.

    FastMCP hands each session a store that knows only a random prefix, not the
    ``Mcp-Session-Id``; the lab keys what it stores by session id, so that any
    replica can find a session's events. The session manager exists only while
    the app's lifespan runs, so the binding is made when it starts.
    """
    endpoint = next(
        route.endpoint
        for route in app.router.routes
        if isinstance(getattr(route, "endpoint", None), StreamableHTTPASGIApp)
    )
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(starlette: Starlette) -> AsyncIterator[Any]:
        async with inner(starlette) as state:
            manager = endpoint.session_manager
            admit = manager._admit_session

            def admit_with_store(requestor: Any) -> Any:
                transport = admit(requestor)
                if transport is not None and transport.mcp_session_id:
                    transport._event_store = make_store(transport.mcp_session_id)
                return transport

            manager._admit_session = admit_with_store  # type: ignore[method-assign]
            yield state

    app.router.lifespan_context = lifespan


class HttpSessions:
    """What the lab needs to know of the Streamable HTTP session manager of an app.

    Relies on mcp 2.3's ``StreamableHTTPSessionManager``: its ``max_sessions`` is
    read on each admission (FastMCP 4 does not pass it, so it is set on the
    manager once it exists); ``_server_instances`` maps the open session ids to
    their transports; ``_admit_session`` returns None for a session refused at
    the limit (the manager then answers 503); each transport's ``idle_scope``
    is cancelled once no request has been in flight (an open GET stream counts)
    for ``session_idle_timeout``, which ends the session, runs its connection's
    exit stack (``on_session_end``) while the transport is still in
    ``_server_instances``, and afterwards makes its id answer 404.
    """

    def __init__(self) -> None:
        self._manager: Any = None

    def open(self) -> int:
        """Sessions open now (0 before the app has started)."""
        return 0 if self._manager is None else len(self._manager._server_instances)

    def expired_idle(self, session_id: str) -> bool:
        """Whether the session ``session_id`` is ending because it was idle too long."""
        if self._manager is None:
            return False
        transport = self._manager._server_instances.get(session_id)
        scope = getattr(transport, "idle_scope", None)
        return scope is not None and bool(scope.cancel_called)

    def bind(self, app: Starlette, max_sessions: int, on_refused: Callable[[int], None]) -> None:
        """Watch ``app``'s session manager from when its lifespan starts: at most
        ``max_sessions`` open; ``on_refused(open_count)`` for each one refused."""
        endpoint = _streamable_endpoint(app)
        inner = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(starlette: Starlette) -> AsyncIterator[Any]:
            async with inner(starlette) as state:
                manager = endpoint.session_manager
                manager.max_sessions = max_sessions
                admit = manager._admit_session

                def admit_or_refuse(requestor: Any) -> Any:
                    transport = admit(requestor)
                    if transport is None:
                        on_refused(len(manager._server_instances))
                    return transport

                manager._admit_session = admit_or_refuse  # type: ignore[method-assign]
                self._manager = manager
                try:
                    yield state
                finally:
                    self._manager = None

        app.router.lifespan_context = lifespan


def _streamable_endpoint(app: Starlette) -> StreamableHTTPASGIApp:
    """The Streamable HTTP endpoint among ``app``'s routes."""
    return next(
        route.endpoint
        for route in app.router.routes
        if isinstance(getattr(route, "endpoint", None), StreamableHTTPASGIApp)
    )
