"""The dashboard's downloads, pictures and matrix, beside ``/api/report``.

``/api/report.json``  the report the dashboard shows, as a file (sessions by label)
``/api/report.md``    the same as markdown (``mcp-lab report --format markdown``)
``/api/report.html``  the same as one self-contained HTML page (``--format html``)
``/api/picture``      ``?session=<label>``: that session's sequence picture (SVG)
``/api/matrix``       the matrix history, as the server was given it to show (``mcp-lab
                      server`` is given :func:`services.runners.matrix_history.matrix`):
                      the latest verdict per client, scenario and setup, and the history
                      behind it; and the bridges' latest marks per bridge, direction
                      and scenario with theirs

Each report comes from the server's one :class:`~services.server.dashboard_feed.DashboardFeed`
(the report ``/api/report`` gives, at most half a second old). The guard lets these
through on the same terms as ``/api/report``: the bearer token, or the dashboard's
cookie (services/server/guard.py). HTML and SVG go out with a Content-Security-Policy
that lets nothing load or run.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.evidence import html_report, picture, report
from services.server.dashboard_feed import DashboardFeed

# Reads the matrix history (the runners' verdicts kept on disk) as /api/matrix gives it.
Matrix = Callable[[], dict[str, Any]]

_LOCKED = "default-src 'none'; style-src 'unsafe-inline'"
_KINDS = {
    "json": ("application/json", "json"),
    "md": ("text/markdown; charset=utf-8", "md"),
    "html": ("text/html; charset=utf-8", "html"),
}


def _unavailable(exc: Exception) -> Response:
    return JSONResponse({"error": f"redis unavailable: {exc}"}, status_code=503)


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", **(extra or {})}


def _file_name(data: dict[str, Any], ext: str) -> str:
    run = (data.get("run") or {}).get("id") or "since"
    return f"mcp-lab-report-{re.sub(r'[^0-9A-Za-z-]', '', str(run))[:40]}.{ext}"


async def download(feed: DashboardFeed, kind: str) -> Response:
    """The report as a file of ``kind`` (``json``, ``md`` or ``html``)."""
    media, ext = _KINDS[kind]
    try:
        made, data = await feed.built()
    except (RedisError, OSError) as exc:
        return _unavailable(exc)
    if kind == "json":
        body = json.dumps(data, indent=2)
    elif kind == "md":
        body = report.to_markdown(made)
    else:
        body = html_report.html_of(data)
    disposition = f'attachment; filename="{_file_name(data, ext)}"'
    extra = {"Content-Disposition": disposition}
    if kind == "html":
        extra["Content-Security-Policy"] = _LOCKED
    return Response(body, media_type=media, headers=_headers(extra))


async def session_picture(feed: DashboardFeed, request: Request) -> Response:
    """``?session=<label>``: the picture of that session of the current report."""
    label = request.query_params.get("session", "")
    try:
        data = await feed.report()
    except (RedisError, OSError) as exc:
        return _unavailable(exc)
    for client in data.get("clients", []):
        for session in client.get("sessions", []):
            if session.get("session") == label:
                flow = picture.flow_of(session, str(client["client"]), str(client["version"]))
                return Response(
                    picture.session_svg(flow),
                    media_type="image/svg+xml",
                    headers=_headers({"Content-Security-Policy": _LOCKED}),
                )
    return JSONResponse({"error": "no such session in the current report"}, status_code=404)


async def clients_matrix(matrix: Matrix | None) -> Response:
    """The matrix history, read by ``matrix`` (in a thread: it reads a file); 404 for a
    server given none."""
    if matrix is None:
        return JSONResponse({"error": "this server shows no matrix history"}, status_code=404)
    try:
        data = await asyncio.to_thread(matrix)
    except (sqlite3.Error, OSError, ValueError) as exc:
        return JSONResponse({"error": f"the history could not be read: {exc}"}, status_code=503)
    return JSONResponse(data, headers=_headers())
