"""The dashboard's downloads, pictures and matrix (services/mcp_lab/server/exports.py) on an
in-process lab after a real client's flow, and who may fetch them: the same as
``/api/report`` (the bearer token, or the dashboard page's cookie; never ``?token=``)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
from mcp_lab.runners.bridges.verdict import DROPPED, PASSED, BridgeRow, StepCell
from mcp_lab.runners.clients.history import CLIENT_HISTORY
from mcp_lab.runners.clients.matrix import Check, ClientRow
from mcp_lab.runners.history_store import HISTORY_ENV
from tests.support.http_calls import aget
from tests.support.lab import STATUS_URI, connect

pytestmark = pytest.mark.anyio

DELAY = "0.3"
BOUND = 10.0
TOKEN = "s3cret"


async def flow(url: str) -> None:
    """The ideal flow by a client named ``exported``."""
    async with connect(url, "exported") as client:
        await client.session.list_resources()
        await client.read_text()
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=float(DELAY) + BOUND)
        await client.read_text()


async def test_the_report_downloads_as_markdown_json_and_html_and_a_picture_per_session(
    inproc,
) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)
    await flow(url)
    await server.await_line(r"\[session/end\] .*client=exported/")
    connected = await server.await_line(r"\[initialize\] .*client=exported/")
    session_id = re.search(r"session=(\S+)", connected).group(1)  # type: ignore[union-attr]
    base = url.removesuffix("/mcp")

    as_json = await aget(f"{base}/api/report.json")
    assert as_json.status_code == 200
    assert as_json.headers["content-disposition"].startswith('attachment; filename="mcp-lab-')
    data = json.loads(as_json.text)
    (entry,) = [c for c in data["clients"] if c["client"] == "exported"]
    assert entry["level"] == 6
    label = entry["sessions"][0]["session"]
    assert label != session_id and session_id not in as_json.text  # labels, never ids

    markdown = await aget(f"{base}/api/report.md")
    assert markdown.status_code == 200 and markdown.headers["content-type"].startswith(
        "text/markdown"
    )
    assert "## exported" in markdown.text and "```mermaid\nsequenceDiagram" in markdown.text
    assert session_id not in markdown.text

    page = await aget(f"{base}/api/report.html")
    assert (
        page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    )
    assert page.text.count('<svg xmlns="http://www.w3.org/2000/svg" class="flow"') >= 1
    assert label in page.text and session_id not in page.text

    picture = await aget(f"{base}/api/picture?session={label}")
    assert picture.status_code == 200 and picture.headers["content-type"] == "image/svg+xml"
    svg = ET.fromstring(picture.text)
    assert svg.get("data-level") == "6" and svg.get("data-session") == label
    unknown = await aget(f"{base}/api/picture?session={session_id}")
    assert unknown.status_code == 404  # a session id is no label


async def test_the_downloads_need_what_the_report_needs(inproc) -> None:
    _, url = await inproc.server(auth_token=TOKEN)
    base = url.removesuffix("/mcp")
    paths = ["/api/report.json", "/api/report.md", "/api/report.html", "/api/matrix",
             "/api/picture?session=x"]  # fmt: skip
    for path in paths:
        assert (await aget(f"{base}{path}")).status_code == 401, path
        joiner = "&" if "?" in path else "?"
        assert (await aget(f"{base}{path}{joiner}token={TOKEN}")).status_code == 401, path
    cookie = (await aget(f"{base}/?token={TOKEN}")).headers["set-cookie"].split(";", 1)[0]
    for path in paths:
        answer = await aget(f"{base}{path}", Cookie=cookie)
        assert answer.status_code == (404 if path.startswith("/api/picture") else 200), path


async def test_the_matrix_is_the_history_of_clients_runs(
    inproc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "history.sqlite3"
    monkeypatch.setenv(HISTORY_ENV, str(kept))
    _, url = await inproc.server()
    base = url.removesuffix("/mcp")
    empty = await aget(f"{base}/api/matrix")
    assert empty.status_code == 200
    assert {k: v for k, v in empty.json().items() if k != "bridge_steps"} == {
        "scenarios": [],
        "clients": [],
        "bridges": [],
    }

    for version, level in (("1.0.0", 3), ("1.1.0", 6)):
        row = ClientRow("opencode", version, "single", "tool", level=level, server_level=level)
        row.checklist = {"re_read": Check("yes" if level == 6 else "no")}
        CLIENT_HISTORY.record([row], path=kept)
    data = (await aget(f"{base}/api/matrix")).json()
    assert "database" not in data  # where the file is stays on the machine
    (client,) = data["clients"]
    (cell,) = client["cells"]
    assert (cell["scenario"], cell["setup"], cell["latest"]["version"]) == (
        "single",
        "tool",
        "1.1.0",
    )
    assert [c["text"] for c in cell["changes"]] == ["1.1.0: level 3 -> 6; re_read: no -> yes"]

    # The bridges' rows are in the same file and the same answer.
    gateway = BridgeRow("supergateway", "4.0.0", "stdio->HTTP", "single", lab_level=5)
    gateway.steps = {"subscribe": StepCell(PASSED), "notified": StepCell(DROPPED, "", "0/1")}
    BRIDGE_HISTORY.record([gateway], path=kept)
    data = (await aget(f"{base}/api/matrix")).json()
    assert len(data["clients"]) == 1 and data["bridge_steps"]["subscribe"] == "subscribe at lab"
    (bridge,) = data["bridges"]
    (cell,) = bridge["cells"]
    assert (bridge["bridge"], cell["direction"], cell["scenario"]) == (
        "supergateway",
        "stdio->HTTP",
        "single",
    )
    assert cell["latest"]["marks"] == {"subscribe": PASSED, "notified": DROPPED}
