"""The dashboard's downloads, pictures and matrix, beside ``/api/report``.

``/api/report.json``  the report the dashboard shows, as a file (sessions by label)
``/api/report.md``    the same as markdown (``mcp-lab report --format markdown``)
``/api/report.html``  the same as one self-contained HTML page (``--format html``)
``/api/picture``      ``?session=<label>``: that session's sequence picture (SVG)
``/api/matrix``       the matrix history, as the server was given it to show (``mcp-lab
                      server`` is given :func:`mcp_lab.runners.matrix_history.matrix`):
                      the latest verdict per client, scenario and setup, and the history
                      behind it; and the bridges' latest marks per bridge, direction
                      and scenario with theirs

Each report comes from the server's one :class:`~mcp_lab.server.dashboard_feed.DashboardFeed`:
the JSON file is the encoding ``/api/report`` sends (at most half a second old, compact
JSON, sent in slices); markdown and HTML are rendered from a build of their own (in the
report worker for a long run); a picture is drawn from the report the dashboards are
shown (that session's JSON alone, in a thread). The guard lets these
through on the same terms as ``/api/report``: the bearer token, or the dashboard's
cookie (services/mcp_lab/server/guard.py). HTML and SVG go out with a Content-Security-Policy
that lets nothing load or run.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_lab.evidence import picture
from mcp_lab.server.dashboard_feed import UNAVAILABLE, DashboardFeed, unavailable

# Reads the matrix history (the runners' verdicts kept on disk) as /api/matrix gives it.
Matrix = Callable[[], dict[str, Any]]

_LOCKED = "default-src 'none'; style-src 'unsafe-inline'"
_KINDS = {
    "json": ("application/json", "json"),
    "md": ("text/markdown; charset=utf-8", "md"),
    "html": ("text/html; charset=utf-8", "html"),
}


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", **(extra or {})}


def _file_name(run: str | None, ext: str) -> str:
    return f"mcp-lab-report-{re.sub(r'[^0-9A-Za-z-]', '', str(run or 'since'))[:40]}.{ext}"


def _attachment(run: str | None, ext: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{_file_name(run, ext)}"'}


async def download(feed: DashboardFeed, kind: str) -> Response:
    """The report as a file of ``kind`` (``json``, ``md`` or ``html``). The JSON is the
    encoding every dashboard shares (sent in slices, never copied); markdown and HTML
    are rendered from a build of their own."""
    media, ext = _KINDS[kind]
    try:
        if kind == "json":
            encoded = await feed.encoded()
            return feed.send_json(encoded, _headers(_attachment(encoded.run, ext)))
        rendered = await feed.rendered(kind)
    except UNAVAILABLE as exc:
        return unavailable(exc)
    extra = _attachment(rendered.run, ext)
    if kind == "html":
        extra["Content-Security-Policy"] = _LOCKED
    return Response(rendered.body, media_type=media, headers=_headers(extra))


async def session_picture(feed: DashboardFeed, request: Request) -> Response:
    """``?session=<label>``: the picture of that session of the report the dashboards
    are shown (that session's JSON alone, read from the shared encoding, drawn in a
    thread), or of a report built now when no dashboard is open."""
    label = request.query_params.get("session", "")
    try:
        encoded = await feed.held()
    except UNAVAILABLE as exc:
        return unavailable(exc)

    def draw() -> str | None:
        found = encoded.session(label)
        return None if found is None else picture.session_svg(picture.flow_of(*found))

    svg = await asyncio.to_thread(draw)
    if svg is None:
        return JSONResponse({"error": "no such session in the current report"}, status_code=404)
    return Response(
        svg,
        media_type="image/svg+xml",
        headers=_headers({"Content-Security-Policy": _LOCKED}),
    )


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
