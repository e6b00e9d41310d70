"""Every use of fastmcp's or mcp's private attributes, in one place.

FastMCP 4 has no public API for ``resources/subscribe``, for withdrawing the
capabilities it always advertises, or for learning when a client session ends.
The low-level server and the per-session ``Connection`` have them; this module
reaches them, so an upgrade of fastmcp or mcp breaks here and nowhere else.
Checked against fastmcp 4.2.3 and mcp 2.3.0.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastmcp import FastMCP
from mcp.server.context import ServerMiddleware
from mcp.server.session import ServerSession
from pydantic import BaseModel


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
