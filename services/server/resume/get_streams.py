"""Logs when a session's standalone GET stream opens and closes.

A notification can only reach a Streamable HTTP client while its GET stream is
open (the SDK drops it otherwise, silently), so the log must show both ends.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from services.logs import Peer, event
from services.server.sessions import SessionRegistry

_SESSION_HEADER = b"mcp-session-id"


def is_get_stream(scope: Scope, path: str) -> bool:
    """Whether ``scope`` is a GET of the MCP endpoint at ``path`` (a standalone stream)."""
    return (
        scope["type"] == "http"
        and scope["method"] == "GET"
        and scope["path"].rstrip("/") == (path.rstrip("/") or "/")
    )


class StreamLogMiddleware:
    """ASGI middleware: ``[stream/open]`` and ``[stream/close]`` for GET on the MCP path."""

    def __init__(self, app: ASGIApp, path: str, registry: SessionRegistry) -> None:
        self._app = app
        self._path = path
        self._registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_get_stream(scope, self._path):
            await self._app(scope, receive, send)
            return
        session = dict(scope["headers"]).get(_SESSION_HEADER, b"").decode("latin-1")
        peer = self._registry.peer(session) or Peer(session=session or "-")
        status: list[int] = []

        async def watch(message: dict) -> None:  # type: ignore[type-arg]
            if message["type"] == "http.response.start":
                status.append(message["status"])
                if message["status"] == 200:
                    self._registry.stream_opened(peer.session)
                    event("stream/open", "GET", peer)
            await send(message)

        try:
            await self._app(scope, receive, watch)
        finally:
            if status and status[0] == 200:
                self._registry.stream_closed(peer.session)
                event("stream/close", "GET", peer)
