"""The lab's stdio connection, serving both protocol eras on it.

The SDK's stdio loop (``mcp.server.runner.serve_dual_era_loop``, reached through
``FastMCP.run_async(transport="stdio")``) lets the client's first request lock the
connection's era: once ``server/discover`` has opened it as 2026-07-28, a later
``initialize`` is refused with -32022. The 2026-07-28 revision asks otherwise of a
dual-era server (``basic/versioning.mdx``, "Backward Compatibility with
Initialization-Based Versions"): a request carrying the per-request ``_meta`` is
served statelessly, "An ``initialize`` request selects legacy semantics, scoped to
the stdio process", and a dual-era server "MAY serve both eras concurrently on the
same endpoint or process". A dual-era client whose ``server/discover`` probe timed
out falls back to ``initialize`` on the same connection (``basic/transports/stdio.mdx``,
"Backward Compatibility"), and that must work.

So :func:`serve_stdio` routes each message by itself, on one dispatcher: a request
with the 2026-07-28 envelope (and not ``initialize``) is served statelessly, as the
SDK's modern loop does; ``initialize`` and every other request go to the one legacy
runner of the connection (which refuses requests before ``initialize`` as the
legacy loop does). Notifications go to the legacy runner once ``initialize`` came,
and are served as modern ones before.

Private SDK names used: ``runner._NoServerRequestsDispatchContext`` (the modern
request context that refuses server-initiated requests), ``FastMCP._mcp_server`` and
``FastMCP._lifespan_manager`` (what ``run_stdio_async`` enters); and, outside
``mcp.server.runner.__all__``, ``modern_error_data`` (a modern handler's exception as
its wire error); ``mcp.server.stdio._claims`` (the private duplicate of fd 1 that
carries the wire, for :func:`end_stdio_wire`). To re-check on an upgrade: that
``serve_dual_era_loop`` still locks the era (if it stops doing so, this module can go),
what ``run_stdio_async`` enters, and that ``_claims[1].private_fd`` is still the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.context import reset_transport, set_transport
from mcp.server import runner as sdk_runner
from mcp.server.connection import Connection, NotifyOnlyOutbound
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.server.runner import ServerRunner, aclose_shielded, modern_error_data, serve_one
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import ValidationError

_NoServerRequests = sdk_runner._NoServerRequestsDispatchContext


def enveloped(params: Mapping[str, Any] | None) -> bool:
    """Whether a message's params carry the 2026-07-28 per-request envelope (its
    protocol version in ``_meta``; a legacy ``_meta`` holds a progress token only)."""
    meta = (params or {}).get("_meta")
    return isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta


class BothEras:
    """The request and notification handlers of one stdio connection, both eras."""

    def __init__(
        self,
        server: Server[Any],
        dispatcher: JSONRPCDispatcher[TransportContext],
        lifespan_state: Any,
        init_options: InitializationOptions,
    ) -> None:
        self._server = server
        self._lifespan_state = lifespan_state
        self._outbound = NotifyOnlyOutbound(dispatcher)
        self.legacy_connection = Connection.for_loop(dispatcher)
        self._legacy = ServerRunner(
            server, self.legacy_connection, lifespan_state, init_options=init_options
        )
        # Set by the first ``initialize``: the connection's legacy session begins.
        self.initialized = False

    async def on_request(
        self,
        dctx: DispatchContext[TransportContext],
        method: str,
        params: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        if method == "initialize":
            self.initialized = True
            return await self._legacy.on_request(dctx, method, params)
        if not enveloped(params):
            return await self._legacy.on_request(dctx, method, params)
        route = classify_inbound_request({"method": method, "params": params})
        if isinstance(route, InboundLadderRejection):
            raise MCPError(code=route.code, message=route.message, data=route.data)
        connection = Connection.from_envelope(
            route.protocol_version,
            route.client_info,
            route.client_capabilities,
            outbound=self._outbound,
        )
        try:
            return await serve_one(
                self._server,
                _NoServerRequests(dctx),
                method,
                params,
                connection=connection,
                lifespan_state=self._lifespan_state,
            )
        except (MCPError, ValidationError):
            raise  # the dispatcher maps these to the wire error
        except Exception as exc:
            error = modern_error_data(exc)
            raise MCPError(code=error.code, message=error.message, data=error.data) from exc

    async def on_notify(
        self,
        dctx: DispatchContext[TransportContext],
        method: str,
        params: Mapping[str, Any] | None,
    ) -> None:
        if self.initialized or method == "notifications/initialized":
            await self._legacy.on_notify(dctx, method, params)
            return
        connection = Connection.from_envelope(
            LATEST_MODERN_VERSION, None, None, outbound=self._outbound
        )
        try:
            runner = ServerRunner(self._server, connection, self._lifespan_state)
            await runner.on_notify(_NoServerRequests(dctx), method, params)
        finally:
            await aclose_shielded(connection)


async def serve_stdio(server: FastMCP) -> None:
    """Serve ``server`` over stdin/stdout, as ``FastMCP.run_async(transport="stdio")``
    does, with both eras on the one connection (:class:`BothEras`)."""
    low = server._mcp_server
    token = set_transport("stdio")
    try:
        async with (
            server._lifespan_manager(),
            stdio_server() as (read_stream, write_stream),
            low.lifespan(low) as lifespan_state,
        ):
            dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                read_stream,
                write_stream,
                # ``initialize`` in the read loop, as the SDK's legacy loop has it, so
                # a request pipelined behind it sees the session initialized.
                inline_methods=frozenset({"initialize"}),
            )
            eras = BothEras(low, dispatcher, lifespan_state, low.create_initialization_options())
            try:
                await dispatcher.run(eras.on_request, eras.on_notify)
            finally:
                await aclose_shielded(eras.legacy_connection)
                await write_stream.aclose()
    finally:
        reset_transport(token)


def end_stdio_wire() -> bool:
    """End the server-to-client half of the stdio connection now: the descriptor the
    SDK writes the wire to (its private duplicate of fd 1) is pointed at the null
    device, so the client reads the end of the connection at once, while what the
    server still writes goes nowhere (it is not closed: a worker thread may still hold
    it). False when the SDK serves fd 1 itself (nothing to point elsewhere)."""
    import os

    from mcp.server import stdio as sdk_stdio

    claim = sdk_stdio._claims.get(1)
    wire = claim.private_fd if claim is not None else None
    if wire is None:
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, wire)
    finally:
        os.close(null)
    return True
