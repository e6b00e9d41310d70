"""Who may talk to the server over HTTP: Host/Origin checks, an optional token, a body limit.

Host and Origin are checked on every route (MCP, SSE, dashboard), each read as
a host and a port (:mod:`mcp_lab.server.host_origin`): a Host that does not name
this server (a loopback name on its port, or one of ``MCP_TEST_ALLOWED_HOSTS``)
gets 421, an Origin that is not the server's own or in ``MCP_TEST_ALLOWED_ORIGINS``
403, as the MCP spec requires; two Host or two Origin headers get 400.
With ``MCP_TEST_AUTH_TOKEN`` set, every request but ``GET /healthz`` needs
``Authorization: Bearer <token>``, else 401. A browser cannot send that header,
so the dashboard page alone (``GET /``) also takes
``?token=<token>``, and hands the browser a cookie (HttpOnly, SameSite=Strict,
an HMAC of the token, not the token) that the page's own data requests
(``GET /api/report``, ``GET /api/stream``, and the downloads, pictures and matrix
beside them) carry, and the page itself when reloaded without the token; it opens
nothing else.

A request body over ``MCP_TEST_MAX_BODY_BYTES`` gets 413: at once when its
Content-Length says so, else (a chunked body, which has no Content-Length) as
soon as the bytes that arrived pass the limit. The guard reads every body
itself, counting, before the app runs, and hands the app the body only once it
is complete and within bounds. So a refusal never meets a response the app has
already started (the app has not been called), and the app never sees a byte of
a refused body. A body longer or shorter than its own Content-Length gets 400
(uvicorn already keeps to the Content-Length; this holds behind any server).
A body that has not all arrived ``MCP_TEST_BODY_TIMEOUT_SECONDS`` after the guard
began to read it (as the request head came) gets 408, as a head that does not
come in time is cut off (:mod:`mcp_lab.server.connections`, where a connection
still sending its body is also one the connection cap may close for room): a
client sending its body a byte a second holds nothing for long.

Any answer that goes out before the request body was read to its end (a 413, a
408, a 401, a 421 or 403 from the Host/Origin check, a 400 for two Host or Origin
headers) closes the connection after it:
uvicorn would otherwise read and discard the rest of the body for as long as the
client sends it, which for an endless chunked body is forever. HTTP clients read
such an early answer (httpx does, even when the write of its body then fails).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

from starlette.types import Message, Receive, Scope, Send

from mcp_lab import untrusted
from mcp_lab.evidence import formats
from mcp_lab.logs import Throttled
from mcp_lab.server.host_origin import HostOrigin
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.guard")

_LOG_SECONDS = 10.0  # lines a client can repeat at will: at most one per this, with a count

_OPEN_PATHS = frozenset({"/healthz"})
# Where ``?token=`` is taken (the dashboard page), and where its cookie is (its data).
_QUERY_TOKEN_PATHS = frozenset({"/"})
_COOKIE_PATHS = frozenset(
    {
        "/api/report",
        "/api/stream",
        # the page's downloads, one per report format, pictures and matrix
        # (services/mcp_lab/server/exports.py)
        *(f.path for f in formats.FORMATS),
        "/api/picture",
        "/api/matrix",
    }
)
DASHBOARD_COOKIE = "mcp_lab_dashboard"


def dashboard_cookie(token: str) -> str:
    """The dashboard cookie's value for ``token``: an HMAC of it, so the cookie is
    no bearer token for anything but the dashboard's data."""
    return hmac.new(token.encode(), b"mcp-subscribe-lab dashboard", hashlib.sha256).hexdigest()


async def _refuse(
    send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]], close: bool = False
) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})


def _with_close(message: Message) -> Message:
    """A ``http.response.start`` with ``connection: close`` (unless it names a connection)."""
    if message["type"] != "http.response.start":
        return message
    headers = list(message.get("headers", []))
    if not any(name.lower() == b"connection" for name, _ in headers):
        headers.append((b"connection", b"close"))
    return {**message, "headers": headers}


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the whole ``body`` in one message, then
    passes on what the server says next (``http.disconnect``, in time)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class BodyGate:
    """The checks of one request before the app runs: 400 for a malformed
    Content-Length, 413 over the body limit, 401 without the bearer token (when
    one is set); then the whole body, counted as it arrives, within
    ``body_timeout`` seconds (else 408).

    Every refusal it sends before the body was read to its end carries
    ``connection: close`` (see the module docstring).
    """

    def __init__(self, token: str | None, max_body_bytes: int, body_timeout: float = 10.0) -> None:
        self._token = token.encode() if token else None
        self._cookie = dashboard_cookie(token).encode() if token else None
        self._max = max_body_bytes
        self._timeout = body_timeout
        self._late = Throttled(logger, _LOG_SECONDS)
        self._gone = Throttled(logger, _LOG_SECONDS)

    async def admit(
        self, scope: Scope, headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> bytes | None:
        """The request's whole body once every check passed; None when it was
        refused here or the client went away mid-body (nothing more to do).
        ``headers``: ``dict(scope["headers"])``."""
        announced = b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0"
        length = headers.get(b"content-length")
        if length is not None and not length.isdigit():
            await _refuse(send, 400, "malformed Content-Length", [], announced)
            return None
        declared = None if length is None else int(length)
        if declared is not None and declared > self._max:
            logger.warning("[guard] body of %s bytes refused (limit %d)", declared, self._max)
            await _refuse(send, 413, f"request body over {self._max} bytes", [], announced)
            return None
        if self._token is not None and scope["path"] not in _OPEN_PATHS:
            if not self._authorized(scope, headers):
                logger.warning("[guard] %s %s without a valid token", scope["method"], _path(scope))
                await _refuse(
                    send,
                    401,
                    "missing or wrong bearer token",
                    [(b"www-authenticate", b'Bearer realm="mcp-subscribe-lab"')],
                    announced,
                )
                return None
        return await self._read_body(scope, receive, send, declared, announced)

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, declared: int | None, announced: bool
    ) -> bytes | None:
        """The whole request body, counted as it arrives; None when the request
        was refused here (413, 408 or 400) or the client went away mid-body."""
        chunks: list[bytes] = []
        received = 0
        framing = "no Content-Length" if declared is None else f"Content-Length {declared}"
        # A request that announced no body has none to wait for: no timer (most GETs).
        deadline = asyncio.get_running_loop().time() + self._timeout if announced else None
        while True:
            try:
                if deadline is None:
                    message = await receive()
                else:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
            except TimeoutError:
                self._late.warning(
                    "[guard] %s %s: body not all here %g s after its head (%d bytes, %s): "
                    "408, connection closed",
                    scope["method"],
                    _path(scope),
                    self._timeout,
                    received,
                    framing,
                )
                said = f"request body not received within {self._timeout:g} s"
                await _refuse(send, 408, said, [], True)
                return None
            if message["type"] != "http.request":
                self._gone.info(
                    "[guard] %s %s: client went away after %d bytes of its body (%s)",
                    scope["method"],
                    _path(scope),
                    received,
                    framing,
                )
                return None
            more = message.get("more_body", False)
            unread = announced and more  # connection: close on a refusal now
            chunk = message.get("body", b"")
            received += len(chunk)
            if declared is not None and received > declared:
                logger.warning(
                    "[guard] body refused: more than its Content-Length of %d bytes arrived "
                    "(%d so far) %s %s",
                    declared,
                    received,
                    scope["method"],
                    _path(scope),
                )
                await _refuse(send, 400, "request body longer than its Content-Length", [], unread)
                return None
            if received > self._max:
                logger.warning(
                    "[guard] body refused at %d bytes, over the limit of %d (%s) %s %s",
                    received,
                    self._max,
                    framing,
                    scope["method"],
                    _path(scope),
                )
                await _refuse(send, 413, f"request body over {self._max} bytes", [], unread)
                return None
            chunks.append(chunk)
            if not more:
                break
        if declared is not None and received < declared:
            logger.warning(
                "[guard] body refused: %d bytes arrived, its Content-Length said %d %s %s",
                received,
                declared,
                scope["method"],
                _path(scope),
            )
            await _refuse(send, 400, "request body shorter than its Content-Length", [])
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _authorized(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        assert self._token is not None and self._cookie is not None
        given = headers.get(b"authorization", b"")
        if given[:7].lower() == b"bearer " and hmac.compare_digest(given[7:].strip(), self._token):
            return True
        if scope["method"] != "GET":
            return False
        if scope["path"] in _QUERY_TOKEN_PATHS:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            tokens = query.get("token", [])
            if any(hmac.compare_digest(t.encode(), self._token) for t in tokens):
                return True
        if scope["path"] in _COOKIE_PATHS or scope["path"] in _QUERY_TOKEN_PATHS:
            cookie = _cookie_of(headers.get(b"cookie", b""))
            return cookie is not None and hmac.compare_digest(cookie.encode(), self._cookie)
        return False


def _cookie_of(header: bytes) -> str | None:
    """The dashboard cookie's value in a ``Cookie`` header, if there is one."""
    try:
        cookies = SimpleCookie(header.decode("latin-1"))
    except CookieError:
        return None
    morsel = cookies.get(DASHBOARD_COOKIE)
    return None if morsel is None else morsel.value


class HostOriginCheck:
    """The Host/Origin check (:class:`~mcp_lab.server.host_origin.HostOrigin`):
    :meth:`allows` sends its 400, 421 or 403 and says False, or says True."""

    def __init__(self, allowed_hosts: str, allowed_origins: str) -> None:
        self._rules = HostOrigin(allowed_hosts, allowed_origins)

    async def allows(
        self, scope: Scope, headers: dict[bytes, bytes], send: Send, announced: bool
    ) -> bool:
        """Whether the request's Host and Origin pass; a refusal (sent here) closes
        the connection when a body was announced (it is not read). Two Host or two
        Origin headers get 400: which one counts would depend on who reads them."""
        hosts = origins = 0
        for name, _ in scope["headers"]:
            if name == b"host":
                hosts += 1
            elif name == b"origin":
                origins += 1
        if hosts > 1 or origins > 1:
            twice = "Host" if hosts > 1 else "Origin"
            self._rules.refused_twice(twice)
            await _refuse(send, 400, f"more than one {twice} header", [], announced)
            return False
        host = headers.get(b"host", b"").decode("latin-1")
        scheme = scope.get("scheme", "http")
        if not self._rules.host_allowed(host, scope.get("server"), scheme):
            await _refuse(send, 421, "misdirected request: Host not served here", [], announced)
            return False
        origin = headers.get(b"origin")
        if origin is not None and not self._rules.origin_allowed(
            origin.decode("latin-1"), host, scheme
        ):
            await _refuse(send, 403, "forbidden Origin", [], announced)
            return False
        return True


@dataclass(frozen=True)
class Security:
    """Every check of this module, for the layer that runs them itself
    (:func:`mcp_lab.server.asgi.guard`, ``FrontDoor``)."""

    host_origin: HostOriginCheck | None
    gate: BodyGate

    @classmethod
    def of(cls, settings: LabSettings) -> Security:
        host_origin = (
            HostOriginCheck(settings.allowed_hosts, settings.allowed_origins)
            if settings.host_origin_protection
            else None
        )
        gate = BodyGate(settings.auth_token, settings.max_body_bytes, settings.body_timeout_seconds)
        return cls(host_origin, gate)

    async def admit(
        self, scope: Scope, headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> bytes | None:
        """The request body once every check passed (None: refused, or gone);
        ``headers``: ``dict(scope["headers"])``."""
        if self.host_origin is not None:
            announced = (
                b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0"
            )
            if not await self.host_origin.allows(scope, headers, send, announced):
                return None
        return await self.gate.admit(scope, headers, receive, send)


def _path(scope: Scope) -> str:
    """The request path for a log line (percent-decoded: a client chooses any
    characters), cut and escaped."""
    return untrusted.shown(scope.get("path", ""), untrusted.PATH_CHARS)
