"""Request ids in flight, per Streamable HTTP session: a second request with an id
still in flight gets an error.

The mcp SDK keys a session's response streams by request id (as a string: ``7``
and ``"7"`` are one id). A second POST with an id whose request has not been
answered yet took the first one's stream, and one of the two was never answered
(the client waited forever, and a client may use that to disturb its own
session's bookkeeping). JSON-RPC asks a client to keep ids unique among its
requests in flight; the front door (services/mcp_lab/server/asgi.py) holds the lab to
that: such a request is answered at once with HTTP 400 and the JSON-RPC error
-32600 (Invalid Request), naming the id, and never reaches the SDK.

It also bounds how many requests of open sessions this server handles at once
(``MCP_TEST_MAX_REQUESTS_AT_ONCE``); the others wait their turn, in order. The
server is one event loop: with thousands of requests in it at once (a burst of
subscribes), every turn of the loop runs a step of each, and the relay, whose
notifications are due now, waited seconds for its turns (docs/performance.md,
"On time"). Only requests wait (a method and an id): notifications and a client's
responses go straight on, so a request waiting for a client's answer cannot hold
the answer back. A request's body has been read whole before it waits, so a slow
client holds no place.
"""

from __future__ import annotations

import asyncio
import json
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_lab import untrusted
from mcp_lab.logs import Throttled

logger = logging.getLogger("mcp_lab.server")

INVALID_REQUEST = -32600
_LOG_SECONDS = 10.0


def request_id(body: bytes) -> str | None:
    """The id of the JSON-RPC request in ``body`` as the SDK keys it (a string), or
    None: a notification, a response, a batch, or no JSON at all (the SDK answers those)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    found = message.get("id")
    if found is None or isinstance(found, bool | dict | list):
        return None
    return str(found)


class InFlightIds:
    """The request ids in flight in each session of this server."""

    def __init__(self, at_once: int | None = None) -> None:
        self._held: set[tuple[bytes, str]] = set()
        self._log = Throttled(logger, _LOG_SECONDS)
        self._at_once = at_once
        self._turns = asyncio.Semaphore(at_once) if at_once else None
        self.waiting = 0  # requests waiting for their turn now
        self._wait_log = Throttled(logger, _LOG_SECONDS)

    def __len__(self) -> int:
        return len(self._held)

    async def serve(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, session: bytes, body: bytes
    ) -> None:
        """Hand a POST of ``session`` (``body``: its whole body) to ``app``, unless
        its request id is in flight in that session already."""
        found = request_id(body)
        if found is None:
            await app(scope, receive, send)
            return
        key = (session, found)
        if key in self._held:
            await self._refuse(send, found)
            return
        self._held.add(key)
        try:
            if self._turns is None:
                await app(scope, receive, send)
                return
            if self._turns.locked():
                self.waiting += 1
                self._wait_log.info(
                    "[server] %d request(s) wait for their turn: %d are handled at once "
                    "(MCP_TEST_MAX_REQUESTS_AT_ONCE)",
                    self.waiting,
                    self._at_once,
                )
                try:
                    await self._turns.acquire()
                finally:
                    self.waiting -= 1
            else:
                await self._turns.acquire()
            try:
                await app(scope, receive, send)
            finally:
                self._turns.release()
        finally:
            self._held.discard(key)

    async def _refuse(self, send: Send, found: str) -> None:
        shown = untrusted.shown(found, 64)
        self._log.warning("[lab] request id %s already in flight in its session: refused", shown)
        error = {
            "jsonrpc": "2.0",
            "id": found,
            "error": {
                "code": INVALID_REQUEST,
                "message": f"request id {untrusted.cut(found, 64)} is already in flight "
                "in this session; ids must be unique among requests in flight",
            },
        }
        body = json.dumps(error).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})
