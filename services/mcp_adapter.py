"""Every use of fastmcp's or mcp's private attributes, in one place.

FastMCP 4 has no public API for ``resources/subscribe``, for withdrawing the
capabilities it always advertises, or for learning when a client session ends.
The low-level server and the per-session ``Connection`` have them; this module
reaches them, so an upgrade of fastmcp or mcp breaks here and nowhere else.
Checked against fastmcp 4.2.3 and mcp 2.3.0.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastmcp import FastMCP
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


def session_state(session: ServerSession) -> dict[str, Any]:
    """A dict that lives as long as the client session behind ``session``."""
    state: dict[str, Any] = session._connection.state
    return state
