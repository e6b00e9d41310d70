"""Who is behind a message: the session key, the client, protocol and transport."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from mcp.server.session import ServerSession
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)

from mcp_lab import protocol, untrusted
from mcp_lab.contract import Peer, Transport
from mcp_lab.server import mcp_adapter

MODERN_SESSION_PREFIX = protocol.MODERN_SESSION_PREFIX
UNKNOWN_CLIENT = protocol.UNKNOWN_CLIENT


@dataclass
class StdioClient:
    """The client of one stdio connection, as its last named request named it."""

    name: str | None = None
    version: str = "?"


# Set while a server serves its one stdio connection (:func:`serving_stdio`): every
# message handled then comes from that connection's one client.
_stdio_client: ContextVar[StdioClient | None] = ContextVar("mcp_lab_stdio_client", default=None)


@contextmanager
def serving_stdio() -> Iterator[StdioClient]:
    """While the lab serves its one client over stdio (``mcp-lab server --transport
    stdio``: a process per client, stdin and stdout its one connection).

    At 2026-07-28 a notification carries no ``clientInfo`` (only requests carry the
    envelope), so the SDK gives it no client. Over stdio it can only come from the
    client at the other end, named by that connection's requests: such a message is
    put in that client's session (``modern:<name>/<version>``) instead of making a
    client ``unknown/?`` of its own (Copilot's ``notifications/cancelled`` at shutdown).
    A message before any named request stays unnamed (the report counts it apart).
    """
    client = StdioClient()
    token = _stdio_client.set(client)
    try:
        yield client
    finally:
        _stdio_client.reset(token)


def _stdio_identity(name: str, version: str) -> tuple[str, str]:
    """The client of a 2026-07-28 message over stdio: the one it names, else the one
    the connection's last named request named (:func:`serving_stdio`)."""
    client = _stdio_client.get()
    if client is None:
        return name, version
    if name != UNKNOWN_CLIENT:
        client.name, client.version = name, version
        return name, version
    if client.name is not None:
        return client.name, client.version
    return name, version


def client_name_of(name: object) -> str:
    """The name a client is known by: the clientInfo name it chose, cut; the lab's
    ``unknown`` only when it named none. A chosen name that would read as none (``""``,
    or ``unknown`` itself) is kept quoted, a client of its own (``\"\"``)."""
    if name is None:
        return UNKNOWN_CLIENT
    text = str(name)
    if text in ("", UNKNOWN_CLIENT):
        return json.dumps(text)
    return untrusted.cut(text, untrusted.CLIENT_NAME_CHARS)


def modern_key(name: str, version: str) -> str:
    """The session key of a 2026-07-28 client, which has no session: its clientInfo,
    each part percent-encoded so that no two clients share a key (``a/b`` + ``c``
    and ``a`` + ``b/c``)."""
    return f"{MODERN_SESSION_PREFIX}{untrusted.key_part(name)}/{untrusted.key_part(version)}"


def transport_of(request: Any, mcp_path: str) -> Transport:
    """The transport a message came over: no HTTP request means stdio."""
    if request is None:
        return Transport.STDIO
    path = getattr(getattr(request, "url", None), "path", "")
    on_mcp_path = path.rstrip("/") == mcp_path.rstrip("/")
    return Transport.STREAMABLE_HTTP if on_mcp_path else Transport.SSE


def negotiated_protocol(requested: Any) -> str:
    """The version ``initialize`` settles on when a client asks for ``requested``:
    the same one if the lab speaks it over the handshake, else the newest it does
    (the SDK's rule; it answers the client with this version)."""
    return requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


def make_peer(
    session: ServerSession,
    request: Any,
    mcp_path: str,
    client_info: Any = None,
    requested_protocol: Any = None,
) -> Peer:
    """The session and client behind a message.

    While ``initialize`` itself is handled, the session knows neither the client
    nor the protocol yet (the SDK commits both after the handler chain), so the
    caller passes the raw ``clientInfo`` and the ``protocolVersion`` the client
    asked for; the peer carries the version that is being negotiated.
    """
    if client_info is None and session.client_params is not None:
        client_info = session.client_params.client_info
    if isinstance(client_info, dict):
        name, version = client_info.get("name"), client_info.get("version")
    else:
        name, version = getattr(client_info, "name", None), getattr(client_info, "version", None)
    # Cut where they are taken in: the log, the evidence, the state key and the
    # job target all hold these (services/mcp_lab/untrusted.py).
    client_name = client_name_of(name)
    client_version = untrusted.cut(str(version), untrusted.CLIENT_VERSION_CHARS) if version else "?"
    protocol = session.protocol_version
    if requested_protocol is not None:
        protocol = negotiated_protocol(requested_protocol)
    transport = transport_of(request, mcp_path)
    if protocol in MODERN_PROTOCOL_VERSIONS:
        # 2026-07-28 has no sessions: every request stands alone. The lab keys a
        # modern client by its clientInfo, so its reads and its listen agree.
        if transport == Transport.STDIO:
            client_name, client_version = _stdio_identity(client_name, client_version)
        key = modern_key(client_name, client_version)
    else:
        key = mcp_adapter.session_key(session)
    return Peer(
        session=key,
        client_name=client_name,
        client_version=client_version,
        protocol=protocol,
        transport=transport,
    )
