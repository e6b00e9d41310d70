"""The dashboard's downloads, pictures and matrix, beside ``/api/report``.

``/api/report?format=NAME``  the report in that format (one of
                      :mod:`mcp_lab.evidence.formats`: ``table``, ``markdown``, ``json``,
                      ``html``), sessions by label; any other name: 400, listing them
``/api/report.EXT``   the same as a file, one route per format by its file extension:
                      ``.json``, ``.md``, ``.html``, ``.txt`` (the table)
``/api/picture``      ``?session=<label>``: that session's sequence picture (SVG)
``/api/matrix``       the matrix history, as the server was given it to show (``mcp-lab
                      server`` is given :func:`mcp_lab.runners.matrix_history.matrix`):
                      the latest verdict per client, scenario and setup, and the history
                      behind it; and the bridges' latest marks per bridge, direction
                      and scenario with theirs

The dashboard page (:func:`page`) links to each download, the links written in from
the same list of formats.

Each report comes from the server's one :class:`~mcp_lab.server.dashboard_feed.DashboardFeed`:
the JSON is the encoding ``/api/report`` sends (at most half a second old, compact
JSON, sent in slices); every other format is rendered from a build of its own (in the
report worker for a long run); a picture is drawn from the report the dashboards are
shown (that session's JSON alone, in a thread). The guard lets these
through on the same terms as ``/api/report``: the bearer token, or the dashboard's
cookie (services/mcp_lab/server/guard.py). HTML and SVG go out with a Content-Security-Policy
that lets nothing load or run.
"""

from __future__ import annotations

import asyncio
import html
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_lab.evidence import formats, picture
from mcp_lab.evidence.formats import ReportFormat
from mcp_lab.server.dashboard_feed import UNAVAILABLE, DashboardFeed, unavailable

# Reads the matrix history (the runners' verdicts kept on disk) as /api/matrix gives it.
Matrix = Callable[[], dict[str, Any]]

PAGE = Path(__file__).with_name("dashboard.html")
# Where the page's download links go (services/mcp_lab/server/dashboard.html).
_LINKS_MARK = "<!-- report formats -->"

_LOCKED = "default-src 'none'; style-src 'unsafe-inline'"
# Answers a browser would run or draw: sent with _LOCKED.
_ACTIVE_MEDIA = ("text/html", "image/svg+xml")


def page() -> str:
    """The dashboard page, with a download link per report format in its header."""
    links = "\n    ".join(
        f'<a id="export-{html.escape(f.name)}" href="{html.escape(f.path)}" '
        f'title="{html.escape(f.description)}" download>{html.escape(f.name)}</a>'
        for f in formats.FORMATS
    )
    return PAGE.read_text(encoding="utf-8").replace(_LINKS_MARK, links, 1)


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", **(extra or {})}


def _file_name(run: str | None, ext: str) -> str:
    return f"mcp-lab-report-{re.sub(r'[^0-9A-Za-z-]', '', str(run or 'since'))[:40]}.{ext}"


def _attachment(run: str | None, ext: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{_file_name(run, ext)}"'}


async def report_as(feed: DashboardFeed, asked: str) -> Response:
    """``/api/report?format=<asked>``: the report in that format (the same answer as its
    download, shown rather than saved), or 400 naming the formats."""
    try:
        fmt = formats.get(asked)
    except formats.UnknownFormat as exc:
        body = {"error": str(exc), "formats": formats.names()}
        return JSONResponse(body, status_code=400, headers=_headers())
    return await download(feed, fmt, attachment=False)


async def download(feed: DashboardFeed, fmt: ReportFormat, *, attachment: bool = True) -> Response:
    """The report in ``fmt``, as a file unless ``attachment`` is false. The JSON is the
    encoding every dashboard shares (sent in slices, never copied); every other format
    is rendered from a build of its own."""
    try:
        if fmt is formats.JSON:
            encoded = await feed.encoded()
            extra = _attachment(encoded.run, fmt.extension) if attachment else {}
            return feed.send_json(encoded, _headers(extra))
        rendered = await feed.rendered(fmt.name)
    except UNAVAILABLE as exc:
        return unavailable(exc)
    extra = _attachment(rendered.run, fmt.extension) if attachment else {}
    if fmt.media_type.startswith(_ACTIVE_MEDIA):
        extra["Content-Security-Policy"] = _LOCKED
    return Response(rendered.body, media_type=fmt.media_type, headers=_headers(extra))


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
