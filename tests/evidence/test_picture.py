"""A session's picture (services/mcp_lab/evidence/picture.py) read as data: its SVG parsed as XML,
its mermaid diagram as text, and the HTML report that holds the pictures checked for
anything it would load. ``tests/system/test_picture_page.py`` shows the same in Chromium."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from mcp_lab.evidence import html_report, picture, report
from tests.support.pictures import HOSTILE_NAME, SESSION, URI, known_report

SVG = "{http://www.w3.org/2000/svg}"


def flow_of_the_known_client() -> picture.Flow:
    data = report.to_json(known_report())
    client = next(c for c in data["clients"] if c["client"] == "cli")
    return picture.flow_of(client["sessions"][0], "cli", "1.0")


def classes(node: ET.Element) -> set[str]:
    return set(node.get("class", "").split())


def test_the_svg_draws_each_message_the_stream_the_checkpoints_and_the_level() -> None:
    svg = ET.fromstring(picture.session_svg(flow_of_the_known_client()))
    assert svg.tag == f"{SVG}svg" and svg.get("data-level") == "6"
    groups = list(svg.iter(f"{SVG}g"))
    messages = [(g.get("data-method"), sorted(classes(g) - {"msg"})) for g in groups
                if "msg" in classes(g)]  # fmt: skip
    assert messages == [
        ("initialize", ["request"]),
        ("resources/list", ["request"]),
        ("resources/read", ["request"]),
        ("resources/subscribe", ["request"]),
        ("notifications/resources/updated", ["delivered", "notification"]),
        ("notifications/resources/updated", ["dropped", "notification"]),
        ("resources/read", ["request"]),
    ]
    dropped = next(g for g in groups if "dropped" in classes(g))
    texts = ["".join(t.itertext()) for t in dropped.iter(f"{SVG}text")]
    # It ends short of the client, crossed out; its label says so.
    assert texts == ["✗", "notifications/resources/updated v3", f"{URI}, dropped: no open stream"]
    marks = [(g.get("data-checkpoint"), g.get("data-level")) for g in groups
             if "checkpoint" in classes(g)]  # fmt: skip
    assert marks == [
        ("connected", "1"),
        ("discovered", "2"),
        ("read_initial", "3"),
        ("subscribed", "4"),
        ("notified", "5"),
        ("re_read", "6"),
    ]
    bars = [r for r in svg.iter(f"{SVG}rect") if "stream-bar" in classes(r)]
    assert len(bars) == 1 and "open-ended" not in classes(bars[0])
    notes = ["".join(g.itertext()) for g in groups if "stream-note" in classes(g)]
    assert notes == ["GET stream opened", "GET stream closed"]
    steps = [r for r in svg.iter(f"{SVG}rect") if "step" in classes(r)]
    assert [("reached" in classes(s)) for s in steps] == [True] * 6 + [False]
    # The 5 s before the notification and the 2.6 s before the drop are breaks on the axis.
    breaks = ["".join(g.itertext()) for g in groups if "break" in classes(g)]
    assert breaks == ["⋯ 5.0 s", "⋯ 2.6 s"]
    assert SESSION in svg.get("data-session", "")


def test_the_mermaid_diagram_has_the_same_flow() -> None:
    text = picture.mermaid(flow_of_the_known_client())
    lines = text.splitlines()
    assert lines[0] == "sequenceDiagram"
    assert "    C->>L: resources/subscribe test://review/status (+0.300 s)" in lines
    assert "    L-->>C: notifications/resources/updated v2 test://review/status (+5.300 s)" in lines
    assert (
        "    L--xC: notifications/resources/updated v3 test://review/status, dropped: no open "
        "stream (+8.000 s)"
    ) in lines
    assert "    Note right of L: checkpoint: level 6 re-read" in lines
    assert "    Note left of C: GET stream closed (+5.400 s)" in lines


def test_the_markdown_report_has_a_mermaid_diagram_per_client_with_client_values_escaped() -> None:
    text = report.to_markdown(known_report())
    blocks = re.findall(r"```mermaid\n(.*?)\n```", text, flags=re.DOTALL)
    assert len(blocks) == 2
    hostile = next(b for b in blocks if "cli 1.0" not in b)
    # Nothing of the hostile name is markup, a statement separator or an arrow.
    assert "<" not in hostile and ">" not in hostile.replace("->>", "").replace("-->>", "")
    assert "#60;img" in hostile
    assert ";" not in re.sub(r"#[0-9]+;", "", hostile)  # ; ends a statement in mermaid
    assert not any(line.strip().startswith("--x") for line in hostile.splitlines())


class Loads(HTMLParser):
    """Every tag of a page, and each attribute that could make a browser load something."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.loads: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "action", "data", "poster"):
                if not (name == "href" and (value or "").startswith("#")):
                    self.loads.append((tag, name, value or ""))
            if name.startswith("on"):
                self.loads.append((tag, name, value or ""))


def test_the_html_report_is_one_self_contained_file() -> None:
    page = html_report.to_html(known_report())
    parsed = Loads()
    parsed.feed(page)
    assert parsed.loads == []  # in-page anchors only
    assert not {"script", "link", "img", "iframe", "object", "embed", "image", "use"} & set(
        parsed.tags
    )
    assert "url(" not in page and "@import" not in page
    assert "default-src 'none'" in page  # its CSP: nothing may load, even if something did
    assert parsed.tags.count("svg") == 2  # a picture per session
    # Sessions are named by a label, never by their Mcp-Session-Id.
    assert SESSION not in page and "deadbeef" not in page
    # The hostile name and version are text.
    assert "<img" not in page and "<script" not in page and "&lt;img" in page
    assert HOSTILE_NAME not in page
