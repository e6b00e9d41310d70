"""The lab's one ASGI layer in front of the Starlette app (MCP, legacy SSE, dashboard).

It reads a request's method, path and headers once and sends it where it needs
to go; each concern's logic lives in its own module:

* every HTTP request: the security checks (:mod:`mcp_lab.server.guard`: Host
  and Origin, the token, the body limit; the body is read here, whole, before
  the app runs), when the layer was made with them (:func:`guard` does);
* ``GET <mcp path>`` (a session's stream): its open/close evidence
  (:class:`~mcp_lab.server.resume.get_streams.StreamLog`), then priming and
  resuming on any replica (:class:`~mcp_lab.server.resume.middleware.Resume`)
  when ``MCP_TEST_RESUMABLE`` is on;
* ``POST <mcp path>`` without ``Mcp-Session-Id`` (it may open a session): the
  session cap's log line and ``Retry-After`` (:class:`~mcp_lab.server.lifecycle.SessionCap`);
  a ``subscriptions/listen`` (a stream of its own, 2026-07-28) and ``GET <sse path>``
  (a legacy SSE session) are counted in that cap for as long as they last, and
  refused with 503 past it; a listen may be hung up on (:mod:`mcp_lab.server.hangup`);
* ``POST <mcp path>`` of an open session, its body read: its request id must not
  be in flight in that session already (:class:`~mcp_lab.server.inflight.InFlightIds`);
* ``DELETE <mcp path>`` (a client ends its session): its evidence, once answered
  (:class:`~mcp_lab.server.lifecycle.DeleteLog`), when the layer has one;
* everything else (other paths, lifespan): straight to the app, nothing wrapped.

Before, each concern was an ASGI middleware of its own (three inside Starlette's
middleware stack, three around it), each checking every request again and some
wrapping every ``send``; see docs/dev/performance-notebook.md, "Fast path per request".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_lab import protocol
from mcp_lab.server import hangup
from mcp_lab.server.guard import Security, replay
from mcp_lab.server.inflight import InFlightIds
from mcp_lab.server.lifecycle import DeleteLog, SessionCap
from mcp_lab.server.resume.get_streams import StreamLog, stream_request
from mcp_lab.settings import LabSettings

_SESSION_HEADER = protocol.SESSION_HEADER_BYTES
_LISTEN = protocol.LISTEN


def normal_path(path: str) -> str:
    """``path`` without a trailing slash (``/`` stays ``/``)."""
    return path.rstrip("/") or "/"


@dataclass(frozen=True)
class FrontDoor:
    """The app behind the lab's one ASGI layer; :meth:`secured` adds the security checks."""

    app: ASGIApp
    path: str
    streams: StreamLog
    cap: SessionCap
    security: Security | None = None
    deletes: DeleteLog | None = None
    sse_path: str | None = None
    in_flight: InFlightIds = field(default_factory=InFlightIds)

    def secured(self, security: Security) -> FrontDoor:
        """The same layer, running ``security``'s checks on every HTTP request first."""
        return replace(self, security=security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = first_values(scope["headers"])
        body: bytes | None = None
        if self.security is not None:
            body = await self.security.admit(scope, headers, receive, send)
            if body is None:  # refused (and answered), or the client left
                return
            receive = replay(body, receive)
        path, method = normal_path(scope["path"]), scope["method"]
        if path != self.path:
            if method == "GET" and path == self.sse_path:
                await self.cap.long_lived(scope, receive, send, "legacy SSE session")
            else:
                await self.app(scope, receive, send)
            return
        if method == "GET":
            session, last_event_id = stream_request(headers)
            await self.streams.serve(scope, receive, send, session, last_event_id)
        elif method == "POST" and _SESSION_HEADER not in headers:
            if body is not None and is_listen(body):
                # A listen the lab may end without its result (hangup: dropped-stream).
                await hangup.serve_http(self._listen, scope, receive, send)
            else:
                await self.cap(scope, receive, send)
        elif method == "POST" and body is not None:
            held_by = headers[_SESSION_HEADER]
            await self.in_flight.serve(self.app, scope, receive, send, held_by, body)
        elif method == "DELETE" and self.deletes is not None:
            session = headers.get(_SESSION_HEADER, b"").decode("latin-1")
            await self.deletes(scope, receive, send, session)
        else:
            await self.app(scope, receive, send)

    async def _listen(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.cap.long_lived(scope, receive, send, f"{_LISTEN} stream")


def is_listen(body: bytes) -> bool:
    """Whether ``body`` is a ``subscriptions/listen`` request (parsed only when it
    names the method at all)."""
    if _LISTEN.encode() not in body:
        return False
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(message, dict) and message.get("method") == _LISTEN


def first_values(raw: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Each header's first value, as Starlette and the SDK read it: a request with
    two ``Mcp-Session-Id`` headers is the same session to every layer."""
    headers: dict[bytes, bytes] = {}
    for name, value in raw:
        headers.setdefault(name, value)
    return headers


def guard(app: FrontDoor, settings: LabSettings) -> FrontDoor:
    """The lab's app (``http_app``'s :class:`FrontDoor`) with every check of
    :mod:`mcp_lab.server.guard` run first, in its one layer."""
    return app.secured(Security.of(settings))
