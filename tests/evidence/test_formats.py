"""The report formats (services/mcp_lab/evidence/formats.py): each declared once and
offered from there alone: by ``mcp-lab report --format``, ``/api/report?format=``, the
downloads and the dashboard's links; one name each (``md`` is markdown's file
extension, never a name)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.cli.main import build_parser
from mcp_lab.contract import Event
from mcp_lab.evidence import formats
from mcp_lab.evidence.build import Report
from mcp_lab.evidence.encoded import encode
from mcp_lab.evidence.labels import SessionLabels
from mcp_lab.evidence.report import to_json
from mcp_lab.evidence.scoring import score_window
from mcp_lab.evidence.worker import KINDS
from mcp_lab.scenarios import registry
from tests.support.http_calls import aget
from tests.support.lab import STATUS_URI, connect

UPDATED = "notifications/resources/updated"
SESSION = "sess-0123456789abcdef"  # an id, which no public rendering may show
LABELS = SessionLabels(bytes(range(32)), of_lab=True)


def ev(ts: int, method: str, direction: str = "in", **fields: object) -> Event:
    base: dict[str, object] = dict(
        session=SESSION,
        client="cli",
        client_version="1.0",
        protocol="2025-11-25",
        transport="streamable-http",
        uri=None,
        version=None,
        delivered=None,
        error=None,
    )
    base.update(fields)
    return Event(ts_ms=ts, direction=direction, method=method, **base)  # type: ignore[arg-type]


def a_report() -> Report:
    events = [
        ev(1000, "initialize"),
        ev(1100, "resources/list"),
        ev(1200, "resources/read", uri=REVIEW_STATUS.uri, version=1),
        ev(1300, "resources/subscribe", uri=REVIEW_STATUS.uri),
        ev(6300, UPDATED, "out", uri=REVIEW_STATUS.uri, version=2, delivered=True),
        ev(6420, "resources/read", uri=REVIEW_STATUS.uri, version=2),
        ev(500, "session/end", session="sess-earlier", client="past", client_version="2"),
    ]
    scores = score_window(events)
    return Report("0-0", None, registry.get("single"), scores.clients, 0, 99_000, None,
                  left_out=scores.left_out)  # fmt: skip


def report_parser() -> argparse.ArgumentParser:
    for action in build_parser(with_clients=False)._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["report"]
    raise AssertionError("no report subcommand")


def test_every_format_is_declared_once_with_all_it_needs() -> None:
    assert formats.names() == [f.name for f in formats.FORMATS]
    assert formats.DEFAULT == "table" and formats.get("markdown").extension == "md"
    for fmt in formats.FORMATS:
        assert fmt.name and fmt.media_type and fmt.extension and fmt.description
        assert fmt.path == f"/api/report.{fmt.extension}"
        assert formats.get(fmt.name) is fmt
    assert len({f.extension for f in formats.FORMATS}) == len(formats.FORMATS)
    assert set(KINDS) == {"report", *formats.names()}  # what the report worker renders


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_every_format_renders_and_its_public_rendering_shows_no_session_id(fmt) -> None:
    made = a_report()
    own = fmt.render(made, LABELS, public=False)
    public = fmt.render(made, LABELS, public=True)
    assert own.strip() and public.strip()
    assert "cli" in public and LABELS(SESSION) in public
    assert SESSION not in public and "sess-earlier" not in public
    if fmt.media_type.startswith("application/json"):
        json.loads(own)
        json.loads(public)


def test_the_json_served_is_the_encoding_the_dashboards_share() -> None:
    made = a_report()
    public = formats.JSON.render(made, LABELS, public=True).encode()
    assert public == bytes(encode(LABELS.public(to_json(made))).json)
    own = json.loads(formats.JSON.render(made, LABELS, public=False))
    assert own["clients"][0]["sessions"][0]["session"] == SESSION  # the lab's own view


def test_the_public_table_names_sessions_by_label_the_lab_s_by_label_and_id() -> None:
    made = a_report()
    label = LABELS(SESSION)
    assert f"session {label} (id {SESSION}," in formats.TABLE.render(made, LABELS, public=False)
    assert f"session {label} (2025-11-25," in formats.TABLE.render(made, LABELS, public=True)
    assert made.clients[0].sessions[0].session == SESSION  # relabelled a copy, not it


def test_the_cli_offers_the_registry_s_formats_and_says_what_each_is() -> None:
    (action,) = [a for a in report_parser()._actions if a.dest == "format"]
    assert list(action.choices or []) == formats.names()
    assert action.default == formats.DEFAULT
    assert action.help == formats.help_text()
    for fmt in formats.FORMATS:
        assert f"{fmt.name}: {fmt.description}" in formats.help_text()


@pytest.mark.parametrize("asked", ["md", "nope", "MARKDOWN"])
def test_the_cli_refuses_any_other_name_listing_the_formats(asked, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        report_parser().parse_args(["--format", asked])
    assert exited.value.code == 2
    assert "'markdown'" in capsys.readouterr().err


def test_a_file_extension_is_no_format_name() -> None:
    with pytest.raises(formats.UnknownFormat, match=r"extension of 'markdown'.*table, markdown"):
        formats.get("md")
    with pytest.raises(formats.UnknownFormat, match=r"no report format 'nope'; the formats are"):
        formats.get("nope")


async def flow(url: str) -> None:
    async with connect(url, "formatted") as client:
        await client.session.list_resources()
        await client.read_text()
        await client.session.subscribe_resource(STATUS_URI)


@pytest.mark.anyio
async def test_the_api_serves_every_format_with_its_media_type(inproc) -> None:
    server, url = await inproc.server()
    await flow(url)
    connected = await server.await_line(r"\[initialize\] .*client=formatted/")
    session_id = re.search(r"session=(\S+)", connected).group(1)  # type: ignore[union-attr]
    base = url.removesuffix("/mcp")
    for fmt in formats.FORMATS:
        for path, saved in ((f"/api/report?format={fmt.name}", False), (fmt.path, True)):
            answer = await aget(f"{base}{path}")
            assert answer.status_code == 200, path
            assert answer.headers["content-type"] == fmt.media_type, path
            disposition = answer.headers.get("content-disposition", "")
            assert disposition.endswith(f'.{fmt.extension}"') if saved else not disposition
            assert "formatted" in answer.text and session_id not in answer.text, path
            if fmt.media_type.startswith("text/html"):
                assert "default-src 'none'" in answer.headers["content-security-policy"]
    plain = await aget(f"{base}/api/report")
    assert plain.headers["content-type"] == "application/json"  # the dashboard's data
    assert "formatted" in plain.text


@pytest.mark.anyio
@pytest.mark.parametrize(("asked", "says"), [("md", "extension of 'markdown'"), ("", "''")])
async def test_the_api_refuses_any_other_name_listing_the_formats(inproc, asked, says) -> None:
    _, url = await inproc.server()
    answer = await aget(f"{url.removesuffix('/mcp')}/api/report?format={asked}")
    assert answer.status_code == 400
    body = answer.json()
    assert says in body["error"] and body["formats"] == formats.names()
    assert "markdown" in body["error"]


@pytest.mark.anyio
async def test_the_dashboard_links_every_download_and_they_need_what_the_report_needs(
    inproc,
) -> None:
    _, url = await inproc.server(auth_token="s3cret")
    base = url.removesuffix("/mcp")
    page = await aget(f"{base}/?token=s3cret")
    assert "<!-- report formats -->" not in page.text
    links = re.findall(r'<a id="export-([^"]+)" href="([^"]+)" title="[^"]+" download>', page.text)
    assert links == [(f.name, f.path) for f in formats.FORMATS]
    cookie = page.headers["set-cookie"].split(";", 1)[0]
    for fmt in formats.FORMATS:
        for path in (fmt.path, f"/api/report?format={fmt.name}"):
            assert (await aget(f"{base}{path}")).status_code == 401, path
            assert (await aget(f"{base}{path}", Cookie=cookie)).status_code == 200, path
