"""HTTP routes beside MCP on the server's port: the dashboard, its data, and health.

``/``            the live dashboard (services/mcp_lab/server/dashboard.html, its download
                 links written in: :func:`mcp_lab.server.exports.page`)
``/api/report``  the current run's report as JSON (sessions by label, never by id);
                 ``?format=NAME`` in another format (services/mcp_lab/evidence/formats.py)
``/api/stream``  server-sent events: the report again whenever evidence is recorded
                 (at most ``MCP_TEST_DASHBOARD_MAX_STREAMS`` at once, 503 past it)
``/api/report.EXT``, ``/api/picture``, ``/api/matrix``
                 downloads of the report (one per format), a session's picture, the
                 clients matrix (services/mcp_lab/server/exports.py)
``/healthz``     Redis reachability, the relay's state (503 when degraded), and the
                 Streamable HTTP sessions open against their cap

The reports come from the server's one :class:`~mcp_lab.server.dashboard_feed.DashboardFeed`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastmcp import FastMCP
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from mcp_lab.evidence import formats
from mcp_lab.evidence.formats import ReportFormat
from mcp_lab.evidence.recorder import Recorder
from mcp_lab.server import exports
from mcp_lab.server.dashboard_feed import UNAVAILABLE, DashboardFeed, unavailable
from mcp_lab.server.guard import DASHBOARD_COOKIE, dashboard_cookie
from mcp_lab.server.mcp_adapter import HttpSessions
from mcp_lab.server.relay import Relay, RelayState
from mcp_lab.server.sessions import SessionRegistry


def add_routes(
    server: FastMCP,
    redis: Redis,
    relay: Relay,
    registry: SessionRegistry,
    recorder: Recorder,
    http_sessions: HttpSessions,
    max_sessions: int,
    feed: DashboardFeed,
    auth_token: str | None = None,
    other_sessions: Callable[[], int] = lambda: 0,
    matrix: exports.Matrix | None = None,
) -> None:
    """Register the dashboard and health routes on ``server``. With ``auth_token``
    the page (reached with the token: the guard let it through) sets the cookie its
    data requests carry (services/mcp_lab/server/guard.py)."""

    @server.custom_route("/", methods=["GET"])
    async def page(_: Request) -> Response:
        response = HTMLResponse(exports.page())
        if auth_token:
            response.set_cookie(
                DASHBOARD_COOKIE,
                dashboard_cookie(auth_token),
                path="/",  # the page too: a reload, its token gone from the address bar
                httponly=True,
                samesite="strict",
            )
        return response

    @server.custom_route("/api/report", methods=["GET"])
    async def api_report(request: Request) -> Response:
        asked = request.query_params.get("format")
        if asked is not None:
            return await exports.report_as(feed, asked)
        try:
            encoded = await feed.encoded()
        except UNAVAILABLE as exc:
            return unavailable(exc)
        return feed.send_json(encoded)

    def download(fmt: ReportFormat) -> Callable[[Request], Awaitable[Response]]:
        async def report_file(_: Request) -> Response:
            return await exports.download(feed, fmt)

        return report_file

    for fmt in formats.FORMATS:
        server.custom_route(fmt.path, methods=["GET"])(download(fmt))

    @server.custom_route("/api/picture", methods=["GET"])
    async def session_picture(request: Request) -> Response:
        return await exports.session_picture(feed, request)

    @server.custom_route("/api/matrix", methods=["GET"])
    async def clients_matrix(_: Request) -> Response:
        return await exports.clients_matrix(matrix)

    @server.custom_route("/api/stream", methods=["GET"])
    async def api_stream(_: Request) -> Response:
        return feed.stream()

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:
        try:
            redis_ok = bool(await redis.ping())
        except (RedisError, OSError):
            redis_ok = False
        healthy = redis_ok and relay.state == RelayState.SUBSCRIBED
        body = {
            "status": "ok" if healthy else "degraded",
            "redis": "ok" if redis_ok else "unreachable",
            "relay": relay.state,
            "relayed": relay.messages_relayed,
            "ignored": relay.messages_ignored,
            "sessions": len(registry),
            "http_sessions": http_sessions.open(),
            "other_sessions": other_sessions(),
            "max_sessions": max_sessions,
            "events_lost": recorder.lost,
            "dashboard_streams": feed.streams,
        }
        return JSONResponse(body, status_code=200 if healthy else 503)
