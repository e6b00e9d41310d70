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
``/healthz``     Redis's state (``ok``, ``full``, ``unreachable``: the store probe's
                 finding, with its outages so far), the relay's state (503 when
                 degraded), and the Streamable HTTP sessions open against their cap

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
from mcp_lab.server.store_health import FULL, OK, UNREACHABLE, HealthPing, StoreHealth


def store_health_of(redis: Redis) -> StoreHealth | None:
    """The store probe behind ``redis`` when it is the server's :class:`HealthPing`."""
    health = getattr(redis, "_health", None) if isinstance(redis, HealthPing) else None
    return health if isinstance(health, StoreHealth) else None


async def store_state(redis: Redis, health: StoreHealth | None) -> dict[str, object]:
    """What ``/healthz`` says of the store: ``redis`` (``ok``, ``full``: it answers but
    refuses writes, ``unreachable``: it does not answer), and with the probe its
    outages so far (``redis_outages``, ``redis_outage_seconds`` of those that ended,
    ``redis_down_seconds`` of the one under way)."""
    try:
        found = OK if await redis.ping() else UNREACHABLE
    except (RedisError, OSError):
        found = UNREACHABLE
    if health is None:
        return {"redis": found}
    if found != OK:  # the probe's finding (the ping raised it): full, or not answering
        found = FULL if health.state == FULL else UNREACHABLE
    return {
        "redis": found,
        "redis_outages": health.outages,
        "redis_outage_seconds": round(health.outage_seconds, 1),
        "redis_down_seconds": round(health.down_for(), 1),
    }


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

    health = store_health_of(redis)

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
        store = await store_state(redis, health)
        healthy = store["redis"] == OK and relay.state == RelayState.SUBSCRIBED
        body = {
            "status": "ok" if healthy else "degraded",
            **store,
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
