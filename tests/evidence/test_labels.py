"""One name per session in every view (services/mcp_lab/evidence/labels.py): the dashboard's
``/api/report``, its downloads, ``mcp-lab report`` in each format and the server's log
line of the session's start all name a session by the one label the lab's secret (kept
in Redis) gives it; the terminal report and its JSON keep the id beside it."""

from __future__ import annotations

import hashlib
import hmac
import json
import re

import pytest

from mcp_lab import contract, state
from mcp_lab.evidence import build, html_report, report
from mcp_lab.evidence.labels import lab_labels
from tests.support.http_calls import aget
from tests.support.inproc import api_report, client_entry
from tests.support.lab import amcp_lab, connect, lab_env
from tests.support.pictures import known_report

pytestmark = pytest.mark.anyio

_LABEL = re.compile(r"[0-9a-f]{10}")


async def _one_session(inproc, name: str) -> tuple[object, str, str, str]:
    """A server, its URL, and one finished session of a client called ``name``: its
    id, and the line the server logged when it started."""
    server, url = await inproc.server()
    async with connect(url, name) as client:
        await client.session.list_resources()
        await client.read_text()
    await server.await_line(rf"\[session/end\] .*client={name}/")
    started = await server.await_line(rf"\[initialize\] .*client={name}/")
    found = re.search(r"session=(\S+)", started)
    assert found is not None, started
    return server, url, found.group(1), started


async def _exported_html(url: str) -> str:
    page = await aget(f"{url.removesuffix('/mcp')}/api/report.html")
    assert page.status_code == 200, page.text
    return page.text


async def test_a_session_has_one_label_on_the_dashboard_in_its_exports_and_in_the_report(
    inproc, redis_url
) -> None:
    _, url, session_id, started = await _one_session(inproc, "named-once")
    dashboard = client_entry(await api_report(url), "named-once")
    label = dashboard["sessions"][0]["session"]
    assert _LABEL.fullmatch(label) and dashboard["best_session"] == label
    assert dashboard["sessions"][0]["label"] == label

    # The dashboard's HTML export, twice: the same label both times, never the id.
    for page in (await _exported_html(url), await _exported_html(url)):
        assert f'data-session="{label}"' in page and session_id not in page

    # What `mcp-lab report` renders (mcp_lab/cli/state_commands.py: build, then the lab's labels).
    redis = state.connect(redis_url)
    try:
        made = await build.build(redis)
        labels = await lab_labels(redis)
    finally:
        await redis.aclose()
    first, second = html_report.to_html(made, labels), html_report.to_html(made, labels)
    for page in (first, second):
        assert f'data-session="{label}"' in page and session_id not in page
        assert "the same label as on the lab's dashboard" in page
    table = report.to_table(made, labels)
    assert f"  session {label} (id {session_id}, " in table, table
    as_json = client_entry(report.to_json(made, labels), "named-once")
    assert as_json["sessions"][0]["session"] == session_id  # whoever runs the lab: the id
    assert as_json["sessions"][0]["label"] == label and as_json["best_label"] == label
    assert f"- Session: {label}" in report.to_markdown(made, labels)

    # The server's log names the session by its id, and once by its label.
    assert started.endswith(f" label={label}"), started


async def test_the_dashboard_labels_under_the_secret_the_lab_keeps_now(inproc, redis_url) -> None:
    """A server that could not share the secret at its start (Redis down), or whose Redis
    lost it, labels as `mcp-lab report` does: under the secret Redis holds at the build."""
    _, url, session_id, _ = await _one_session(inproc, "relabelled")
    secret = "ab" * 32
    redis = state.connect(redis_url)
    try:
        await redis.set(contract.LABEL_SECRET_KEY, secret)
    finally:
        await redis.aclose()
    expected = hmac.new(bytes.fromhex(secret), session_id.encode(), hashlib.sha256).hexdigest()
    entry = client_entry(await api_report(url), "relabelled")
    assert entry["sessions"][0]["session"] == expected[:10]
    assert f'data-session="{expected[:10]}"' in await _exported_html(url)


def test_an_html_page_made_without_the_labs_secret_says_its_labels_are_its_own() -> None:
    page = html_report.to_html(known_report())
    assert "labels of this file alone" in page
    assert "the same label as on the lab's dashboard" not in page


@pytest.mark.process
async def test_mcp_lab_report_names_a_session_by_its_dashboard_label(inproc, redis_url) -> None:
    """``mcp-lab report`` in every format, against the dashboard's label."""
    _, url, session_id, _ = await _one_session(inproc, "named-by-cli")
    label = client_entry(await api_report(url), "named-by-cli")["sessions"][0]["session"]
    env = lab_env(redis_url)

    pages = [await amcp_lab(env, "report", "--format", "html") for _ in range(2)]
    for page in pages:
        assert page.returncode == 0, page.stderr
        assert f'data-session="{label}"' in page.stdout and session_id not in page.stdout

    table = await amcp_lab(env, "report")
    assert table.returncode == 0, table.stderr
    assert f"  session {label} (id {session_id}, " in table.stdout, table.stdout

    as_json = await amcp_lab(env, "report", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    entry = client_entry(json.loads(as_json.stdout), "named-by-cli")
    assert (entry["sessions"][0]["session"], entry["sessions"][0]["label"]) == (session_id, label)

    markdown = await amcp_lab(env, "report", "--format", "markdown")
    assert f"- Session: {label}" in markdown.stdout
