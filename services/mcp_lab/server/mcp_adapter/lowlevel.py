"""The adapter's reach into FastMCP's low-level server and a client session's
connection: request handlers served and withdrawn, capabilities hidden, inbound
middleware, the phase of FastMCP's middleware chain, the end of a session and a
stable id for it (see the package's docstring, :mod:`mcp_lab.server.mcp_adapter`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from fastmcp import FastMCP
from mcp.server.caching import CacheHint
from mcp.server.context import ServerMiddleware
from mcp.server.session import ServerSession
from mcp_types.methods import CACHEABLE_METHODS
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


def set_cache_hints(server: FastMCP, ttl_ms: int, scope: Literal["public", "private"]) -> None:
    """Give every cacheable result (``mcp_types.methods.CACHEABLE_METHODS``) the hints
    ``ttlMs=ttl_ms`` and ``cacheScope=scope``, for whatever handler serves it (a hint a
    handler sets itself wins). FastMCP's ``cache_ttl`` takes whole seconds, positive
    only; the low-level server's ``cache_hints`` take milliseconds, 0 included."""
    hint = CacheHint(ttl_ms=ttl_ms, scope=scope)
    server._mcp_server.cache_hints = dict.fromkeys(CACHEABLE_METHODS, hint)


def withdraw_request_handlers(server: FastMCP, methods: Iterable[str]) -> None:
    """Stop serving ``methods``; their capabilities are no longer advertised."""
    for method in methods:
        server._mcp_server._request_handlers.pop(method, None)


def hide_capabilities(server: FastMCP, names: Iterable[str]) -> None:
    """Leave the capabilities ``names`` (``"tools"``, ``"prompts"``) out of what the
    server advertises (initialize and server/discover), though it serves their methods.

    The low-level server derives each capability from the presence of its list
    handler; its ``get_capabilities`` is wrapped to drop them again.
    """
    low = server._mcp_server
    derive = low.get_capabilities
    hidden: dict[str, Any] = dict.fromkeys(names)

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        return derive(*args, **kwargs).model_copy(update=hidden)

    # mypy refuses assigning to a method; wrapping it is the point here.
    low.get_capabilities = get_capabilities  # type: ignore[method-assign]


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


def typed_hooks_run_now() -> bool:
    """Whether the FastMCP middleware chain running now dispatches the per-method
    hooks (``on_read_resource``, ``on_initialize``...), not only ``on_message``/
    ``on_request``.

    Relies on fastmcp 4.2's ``_dispatch_phase`` ContextVar (``"all"``, ``"typed"``
    or ``"outer"``), which the base ``Middleware.__call__`` reads the same way; a
    middleware that overrides ``__call__`` reads it here.
    """
    from fastmcp.server.middleware.middleware import _dispatch_phase

    return _dispatch_phase.get() in ("all", "typed")
