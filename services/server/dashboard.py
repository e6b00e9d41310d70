"""HTTP routes beside MCP on the server's port: the dashboard, its data, and health.

``/``            the live dashboard (a static page, services/server/dashboard.html)
``/api/report``  the current run's report as JSON
``/api/stream``  server-sent events: the report again whenever evidence is recorded
``/healthz``     Redis reachability, the relay's state (503 when degraded), and the
                 Streamable HTTP sessions open against their cap
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from services import sse
from services.evidence import build, reader, report
from services.evidence.recorder import Recorder
from services.server.mcp_adapter import HttpSessions
from services.server.relay import Relay
from services.server.sessions import SessionRegistry

logger = logging.getLogger("mcp_lab.dashboard")

PAGE = Path(__file__).with_name("dashboard.html")
_BLOCK_MS = 5_000  # below the Redis client socket timeout
_RETRY_SECONDS = 2.0


async def current_report(
    redis: Redis, run_id: str | None = None, recorder: Recorder | None = None
) -> dict[str, Any]:
    """The report of ``run_id`` (the current run when None) as plain data. Its
    ``missing_events`` adds the events this server lost and could not count in
    Redis yet (``recorder``) to those counted there."""
    unsaved = recorder.unsaved_lost if recorder is not None else 0
    return report.to_json(await build.build(redis, run=run_id, unsaved_lost=unsaved))


async def _report_stream(
    redis: Redis, request: Request, recorder: Recorder, block_ms: int
) -> AsyncIterator[bytes]:
    last_id = "$"
    sent_first = False
    yield sse.frame(retry_ms=1000)  # the browser reconnects a second after a lost stream
    while not await request.is_disconnected():
        try:
            if not sent_first:
                last_id = await reader.last_event_id(redis)
                yield _sse(await current_report(redis, recorder=recorder))
                sent_first = True
            newest = await reader.wait_for_events(redis, last_id, block_ms)
            if newest is None:
                yield sse.frame(comment="keepalive")
                continue
            last_id = newest
            yield _sse(await current_report(redis, recorder=recorder))
        except (RedisError, OSError) as exc:
            logger.warning("[dashboard] redis unavailable (%s); retrying", exc)
            yield sse.frame(comment="redis unavailable")
            sent_first = False
            await asyncio.sleep(_RETRY_SECONDS)


def _sse(data: dict[str, Any]) -> bytes:
    return sse.frame(json.dumps(data, separators=(",", ":")), event="report")


def add_routes(
    server: FastMCP,
    redis: Redis,
    relay: Relay,
    registry: SessionRegistry,
    recorder: Recorder,
    http_sessions: HttpSessions,
    max_sessions: int,
    block_ms: int = _BLOCK_MS,
) -> None:
    """Register the dashboard and health routes on ``server``."""

    @server.custom_route("/", methods=["GET"])
    async def page(_: Request) -> Response:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @server.custom_route("/api/report", methods=["GET"])
    async def api_report(_: Request) -> Response:
        try:
            return JSONResponse(await current_report(redis, recorder=recorder))
        except (RedisError, OSError) as exc:
            return JSONResponse({"error": f"redis unavailable: {exc}"}, status_code=503)

    @server.custom_route("/api/stream", methods=["GET"])
    async def api_stream(request: Request) -> Response:
        return StreamingResponse(
            _report_stream(redis, request, recorder, block_ms),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:
        try:
            redis_ok = bool(await redis.ping())
        except (RedisError, OSError):
            redis_ok = False
        healthy = redis_ok and relay.state == "subscribed"
        body = {
            "status": "ok" if healthy else "degraded",
            "redis": "ok" if redis_ok else "unreachable",
            "relay": relay.state,
            "relayed": relay.messages_relayed,
            "ignored": relay.messages_ignored,
            "sessions": len(registry),
            "http_sessions": http_sessions.open(),
            "max_sessions": max_sessions,
            "events_lost": recorder.lost,
        }
        return JSONResponse(body, status_code=200 if healthy else 503)
