"""Who is behind a message (services/mcp_lab/server/peers.py): a 2026-07-28 notification names no
client; over stdio it is the connection's one client."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from mcp.server.connection import Connection
from mcp.server.session import ServerSession

from mcp_lab import protocol
from mcp_lab.contract import Peer, Transport
from mcp_lab.server import peers

COPILOT = {"name": "copilot", "version": "1.0.102"}


def modern_session(client_info: dict[str, str] | None) -> ServerSession:
    """The session the SDK hands a 2026-07-28 message: built from the request's envelope
    (a notification has none: no client info, no capabilities)."""
    capabilities = {} if client_info is not None else None
    connection = Connection.from_envelope(protocol.MODERN, client_info, capabilities)
    return ServerSession(cast(Any, None), connection)


def peer(client_info: dict[str, str] | None, request: Any = None) -> Peer:
    return peers.make_peer(modern_session(client_info), request, "/mcp")


def test_a_nameless_message_over_stdio_is_the_connections_client() -> None:
    with peers.serving_stdio():
        early = peer(None)  # before any named request: nobody to name
        named = peer(COPILOT)
        cancelled = peer(None)  # Copilot's notifications/cancelled at shutdown
    assert (early.client_name, early.session) == (
        protocol.UNKNOWN_CLIENT,
        peers.modern_key(protocol.UNKNOWN_CLIENT, "?"),
    )
    assert named.session == peers.modern_key("copilot", "1.0.102")
    assert cancelled == named and cancelled.transport == Transport.STDIO


def test_a_nameless_message_is_nobodys_outside_one_stdio_connection() -> None:
    with peers.serving_stdio():
        peer(COPILOT)
        over_http = peer(None, SimpleNamespace(url=SimpleNamespace(path="/mcp")))
    assert over_http.client_name == protocol.UNKNOWN_CLIENT  # no connection to fold into
    with peers.serving_stdio():
        assert peer(None).client_name == protocol.UNKNOWN_CLIENT  # a new connection
    assert peer(None).client_name == protocol.UNKNOWN_CLIENT  # not serving stdio


def test_a_client_that_names_itself_empty_or_unknown_is_a_client_of_its_own() -> None:
    # Only a clientInfo with no name is nobody's; an empty name, or "unknown" itself, is
    # what that client chose, kept apart from nobody (and scored like any other).
    assert peer({"name": "", "version": "1"}).client_name == '""'
    assert peer({"name": "unknown", "version": "1"}).client_name == '"unknown"'
    assert peer({"version": "1"}).client_name == protocol.UNKNOWN_CLIENT
    long = peer({"name": "x" * 1000, "version": "1"}).client_name
    assert long == peers.client_name_of("x" * 1000) and len(long) < 200
