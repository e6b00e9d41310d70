"""Who may talk to the server over HTTP: Host/Origin checks, an optional token, a body limit.

Host and Origin are checked on every route (MCP, SSE, dashboard) by FastMCP's
``HostOriginGuardMiddleware`` in strict mode: a Host outside the loopback names
and ``MCP_TEST_ALLOWED_HOSTS`` gets 421, an Origin from another site 403, as the
MCP spec requires. With ``MCP_TEST_AUTH_TOKEN`` set, every request but
``GET /healthz`` needs ``Authorization: Bearer <token>`` (or ``?token=`` for the
dashboard in a browser), else 401. A request body over
``MCP_TEST_MAX_BODY_BYTES`` (by its Content-Length) gets 413.
"""

from __future__ import annotations

import hmac
import json
import logging
from urllib.parse import parse_qs

from fastmcp.server.http import HostOriginGuardMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from services.settings import LabSettings

logger = logging.getLogger("mcp_lab")

_OPEN_PATHS = frozenset({"/healthz"})


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


async def _refuse(send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})


class TokenAndSizeGuard:
    """401 without the bearer token (when one is set), 413 over the body limit."""

    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int) -> None:
        self._app = app
        self._token = token.encode() if token else None
        self._max = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"0")
        if not length.isdigit():
            await _refuse(send, 400, "malformed Content-Length", [])
            return
        if int(length) > self._max:
            logger.warning("[guard] body of %s bytes refused (limit %d)", int(length), self._max)
            await _refuse(send, 413, f"request body over {self._max} bytes", [])
            return
        if self._token is not None and scope["path"] not in _OPEN_PATHS:
            if not self._authorized(scope, headers):
                logger.warning(
                    "[guard] %s %s without a valid token", scope["method"], scope["path"]
                )
                await _refuse(
                    send,
                    401,
                    "missing or wrong bearer token",
                    [(b"www-authenticate", b'Bearer realm="mcp-subscribe-lab"')],
                )
                return
        await self._app(scope, receive, send)

    def _authorized(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        assert self._token is not None
        given = headers.get(b"authorization", b"")
        if given[:7].lower() == b"bearer " and hmac.compare_digest(given[7:].strip(), self._token):
            return True
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        return any(hmac.compare_digest(t.encode(), self._token) for t in query.get("token", []))


def guard(app: ASGIApp, settings: LabSettings) -> ASGIApp:
    """``app`` wrapped in the checks above (the outermost layer runs first)."""
    guarded: ASGIApp = TokenAndSizeGuard(app, settings.auth_token, settings.max_body_bytes)
    if settings.host_origin_protection:
        guarded = HostOriginGuardMiddleware(
            guarded,
            allowed_hosts=_split(settings.allowed_hosts),
            allowed_origins=_split(settings.allowed_origins),
            mode="strict",
        )
    return guarded
