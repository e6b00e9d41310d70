"""The HTML report (``mcp-lab report --format html``) with its pictures, in a real headless
Chromium: the picture of a known flow (subscribe, a delivered and a dropped notification,
the re-read) checked by its structure and labels, not its pixels; and the file loads
nothing but itself."""

from __future__ import annotations

from pathlib import Path

from mcp_lab.evidence import html_report
from tests.support.browser import ARTIFACTS, expect
from tests.support.pictures import HOSTILE_NAME, URI, known_report


def test_the_html_report_shows_each_sessions_flow_and_loads_nothing_else(
    tmp_path: Path, page, errors
) -> None:
    report_file = tmp_path / "report.html"
    report_file.write_text(html_report.to_html(known_report()), encoding="utf-8")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    page.goto(report_file.as_uri())
    expect(page).to_have_title("mcp-subscribe-lab report")
    section = page.locator("section.client").filter(has_text="cli 1.0")
    flow = section.locator("svg.flow")
    expect(flow).to_have_count(1)
    expect(flow).to_have_attribute("data-level", "6")
    expect(flow.locator(".level-bar .step.reached")).to_have_count(6)
    expect(flow.locator(".level-label")).to_have_text("level 6 re-read")
    expect(flow.locator("[data-lane] text")).to_have_text(["cli 1.0", "mcp-subscribe-lab"])

    requests = flow.locator("g.msg.request")
    expect(requests.locator("text:not(.detail)")).to_have_text(
        ["initialize", "resources/list", "resources/read v1", "resources/subscribe",
         "resources/read v3"]
    )  # fmt: skip
    delivered = flow.locator("g.notification.delivered")
    expect(delivered.locator("text").first).to_have_text("notifications/resources/updated v2")
    dropped = flow.locator("g.notification.dropped")
    expect(dropped).to_have_count(1)
    expect(dropped.locator("text.detail")).to_have_text(f"{URI}, dropped: no open stream")
    expect(dropped.locator("text.drop-mark")).to_have_text("✗")
    # The GET stream: a bar from its open to its close, both named beside it.
    expect(flow.locator("rect.stream-bar")).to_have_count(1)
    expect(flow.locator("g.stream-note text")).to_have_text(
        ["GET stream opened", "GET stream closed"]
    )
    expect(flow.locator("g.checkpoint text")).to_have_text(
        ["1 connected", "2 discovered", "3 read initial", "4 subscribed", "5 notified", "6 re-read"]
    )
    expect(flow.locator("g.break text")).to_have_text(["⋯ 5.0 s", "⋯ 2.6 s"])

    # Laid out as a sequence: time runs down, the dropped notification stops short of
    # the client's lifeline, the re-read comes after it.
    box = {name: flow.locator(sel).first.bounding_box() for name, sel in {
        "subscribe": 'g.request[data-method="resources/subscribe"]',
        "notified": "g.notification.delivered",
        "dropped": "g.notification.dropped line",
        "delivered_line": "g.notification.delivered line",
        "reread": 'g.request[data-method="resources/read"] >> nth=1',
    }.items()}  # fmt: skip
    assert all(b is not None for b in box.values()), box
    assert box["subscribe"]["y"] < box["notified"]["y"] < box["dropped"]["y"] < box["reread"]["y"]
    assert box["dropped"]["x"] > box["delivered_line"]["x"] + 20

    # The hostile client's name is text in its heading and its picture, and nothing ran.
    hostile = page.locator("section.client").nth(1)
    expect(hostile.locator("h2")).to_contain_text(HOSTILE_NAME)
    expect(page.locator("img, script, iframe")).to_have_count(0)
    assert page.evaluate("window.__xss") is None

    assert requested == [report_file.as_uri()], requested
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "report-html.png", full_page=True)
    assert errors == []
