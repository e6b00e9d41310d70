"""The report as one self-contained HTML file: something to attach to an issue.

Everything is inline: the stylesheet, and each session's picture as SVG
(:mod:`mcp_lab.evidence.picture`). There is no script, no image, font or link to
load: the file shows the same offline, and its Content-Security-Policy (``default-src
'none'``) forbids a browser to fetch anything for it. Sessions are named by their label
(an HMAC of the id under the lab's secret, :mod:`mcp_lab.evidence.labels`), never by
their ``Mcp-Session-Id``: the label the session has on the dashboard, in ``mcp-lab
report`` and in the server's log, in every export of it. Every value from the evidence
is HTML-escaped, after it is cut and its control characters are escaped
(:mod:`mcp_lab.untrusted`).

It renders the report's JSON (:func:`mcp_lab.evidence.report.to_json`), so the
dashboard's export (already labelled) and ``mcp-lab report --format html`` give the
same page. A page made without the lab's labels (:func:`to_html` without them) labels
under a secret of its own and says so.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from mcp_lab import untrusted
from mcp_lab.evidence import picture
from mcp_lab.evidence.build import Report
from mcp_lab.evidence.labels import OF_LAB, SessionLabels

_NOTE_CHARS = 300
_CSP = "default-src 'none'; style-src 'unsafe-inline'"

_STYLE = """
body { margin: 0; padding: 16px 24px 32px; color: #1b1f24; background: #fff;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 6px; border-top: 1px solid #d0d7de; padding-top: 14px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.meta, .muted { color: #57606a; }
code, .mono, td.time { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
                       font-size: 12px; }
table { border-collapse: collapse; }
th, td { text-align: left; vertical-align: top; padding: 3px 7px;
         border-bottom: 1px solid #d0d7de; }
th { background: #f6f8fa; white-space: nowrap; }
.lvl { display: inline-block; min-width: 1.6em; text-align: center; border-radius: 4px;
       font-weight: 700; padding: 0 4px; margin-right: 4px; }
.lvl.good { background: #dafbe1; color: #116329; }
.lvl.mid { background: #fff8c5; color: #6a4b00; }
.lvl.low { background: #ffebe9; color: #a40e26; }
.picture { overflow-x: auto; margin: 6px 0 10px; }
ul.notes { color: #57606a; margin: 4px 0; padding-left: 18px; }
.note-missing { background: #fff8c5; padding: 4px 8px; border-radius: 4px; }
footer { margin-top: 28px; color: #57606a; font-size: 12px; }
"""


def _h(value: object, limit: int = untrusted.TABLE_CELL_CHARS) -> str:
    """A value from the evidence for HTML text or an attribute: cut, control characters
    escaped, HTML-escaped."""
    return html.escape(untrusted.shown(str(value), limit), quote=True)


def _tone(level: int) -> str:
    return "good" if level >= 6 else "mid" if level >= 3 else "low"


def _badge(level: int, name: str) -> str:
    return f'<span class="lvl {_tone(level)}">{level}</span> {_h(name)}'


def _clock(iso: object) -> str:
    return iso[11:23] if isinstance(iso, str) and len(iso) >= 23 else "—"


def labelled(report: Report, labels: SessionLabels | None = None) -> dict[str, Any]:
    """``report`` as JSON with its sessions named by ``labels`` (the lab's,
    :func:`mcp_lab.evidence.labels.lab_labels`); without them, by labels under a
    secret of this page's own (the page says so)."""
    from mcp_lab.evidence.report import to_json

    return (labels or SessionLabels()).public(to_json(report))


def to_html(report: Report, labels: SessionLabels | None = None) -> str:
    """``mcp-lab report --format html``: the report, sessions named by ``labels``."""
    return html_of(labelled(report, labels))


def _named(data: Mapping[str, Any]) -> str:
    """What the footer says of the sessions' labels: the lab's, or this file's alone."""
    if data.get("label_secret") == OF_LAB:
        return (
            "Each session is named by its label, the same label as on the lab's dashboard, "
            "in mcp-lab report and in the server's log, never by its Mcp-Session-Id."
        )
    return (
        "Sessions are named by labels of this file alone (made without the lab's label "
        "secret: they match no other view), never by their Mcp-Session-Id."
    )


def html_of(data: Mapping[str, Any]) -> str:
    """The page of a report's JSON (sessions already named as they should be shown)."""
    clients = [c for c in data.get("clients") or [] if isinstance(c, Mapping)]
    checkpoints = [c for c in data.get("checkpoints") or [] if isinstance(c, Mapping)]
    scenario = data.get("scenario") or {}
    body = [
        "<h1>mcp-subscribe-lab report</h1>",
        f'<p class="meta">{_h(data.get("window", ""), 200)} · scenario '
        f"<code>{_h(scenario.get('name', '?'))}</code>: {_h(scenario.get('summary', ''), 200)}"
        f" · generated {_h(data.get('generated', '?'))}</p>",
    ]
    missing = data.get("missing_events") or 0
    if missing:
        body.append(
            f'<p class="note-missing">{_h(missing)} event(s) of this window could not be '
            "recorded (Redis unavailable): levels may be lower than what the clients did</p>"
        )
    restarted = data.get("store_restarted")
    if isinstance(restarted, str) and restarted:
        body.append(f'<p class="note-missing">{_h(restarted, 2 * _NOTE_CHARS)}</p>')
    left_out = data.get("left_out")
    notes = left_out.get("notes") if isinstance(left_out, Mapping) else None
    for note in notes if isinstance(notes, list) else []:
        body.append(f'<p class="note-missing">{_h(note, _NOTE_CHARS)}</p>')
    if not clients:
        body.append('<p class="muted">No client has connected in this window.</p>')
    else:
        body.append(_summary(clients, checkpoints))
        body.extend(_client(index, c) for index, c in enumerate(clients))
    levels = data.get("levels") or {}
    legend = " · ".join(f"{_h(k)} {_h(v)}" for k, v in sorted(levels.items(), key=lambda kv: kv[0]))
    body.append(
        f"<footer>Levels: {legend}. Level 7 happens inside the agent; the lab cannot see it. "
        f"{_named(data)}</footer>"  # the lab's text, not the evidence's
    )
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>mcp-subscribe-lab report</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


def _summary(clients: list[Mapping[str, Any]], checkpoints: list[Mapping[str, Any]]) -> str:
    head = ["client", "level", *(str(c.get("name", "?")) for c in checkpoints), "sessions"]
    rows = ["<tr>" + "".join(f"<th>{_h(h)}</th>" for h in head) + "</tr>"]
    for index, client in enumerate(clients):
        best = _best(client)
        marks = (best or {}).get("checkpoints") or {}
        cells = [
            f'<td><a href="#client-{index}">{_h(client.get("client", "?"))} '
            f"{_h(client.get('version', '?'))}</a></td>",
            f"<td>{_badge(int(client.get('level') or 0), str(client.get('level_name', '')))}</td>",
            *(f'<td class="time">{_clock(marks.get(c.get("key")))}</td>' for c in checkpoints),
            f"<td>{len(client.get('sessions') or [])}</td>",
        ]
        rows.append(f'<tr data-client="{index}">' + "".join(cells) + "</tr>")
    return '<table class="clients">' + "\n".join(rows) + "</table>"


def _best(client: Mapping[str, Any]) -> Mapping[str, Any] | None:
    sessions = client.get("sessions") or []
    best = client.get("best_session")
    first = sessions[0] if sessions else None
    return next((s for s in sessions if s.get("session") == best), first)


def _client(index: int, client: Mapping[str, Any]) -> str:
    name, version = str(client.get("client", "?")), str(client.get("version", "?"))
    level = int(client.get("level") or 0)
    parts = [
        f'<section class="client" id="client-{index}">',
        f"<h2>{_h(name, untrusted.CLIENT_NAME_CHARS)} {_h(version, untrusted.CLIENT_VERSION_CHARS)}"
        f" · level {_badge(level, str(client.get('level_name', '')))}</h2>",
    ]
    checks = [c for c in client.get("checks") or [] if isinstance(c, Mapping)]
    if checks:
        items = "".join(
            f"<li>{_h(c.get('title', '?'))}: {_h(c.get('answer', '?'), _NOTE_CHARS)}</li>"
            for c in checks
        )
        parts.append(f'<ul class="checks">{items}</ul>')
    notes = client.get("notes") or []
    if notes:
        items = "".join(f"<li>{_h(n, _NOTE_CHARS)}</li>" for n in notes)
        parts.append(f'<ul class="notes">{items}</ul>')
    for session in client.get("sessions") or []:
        flow = picture.flow_of(session, name, version)
        parts.append(
            f"<h3>session <code>{_h(flow.session, 40)}</code> · {_h(flow.protocol)} · "
            f"{_h(flow.transport)} · level {_badge(flow.level, str(session.get('level_name', '')))}"
            "</h3>"
        )
        parts.append(f'<div class="picture">{picture.session_svg(flow)}</div>')
    parts.append("</section>")
    return "\n".join(parts)
