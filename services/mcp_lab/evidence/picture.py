"""A session's flow as a picture: a sequence (swimlane) of the client's requests and the
lab's notifications on a time axis.

Two renderings of one session of the report's JSON (:func:`mcp_lab.evidence.report.to_json`,
or the dashboard's labelled copy of it):

- :func:`session_svg`, an SVG drawn here (no library): two lifelines (the client, the
  lab), an arrow per message (requests to the right; notifications to the left, a
  dropped one dashed and crossed out before it reaches the client), the session's GET
  streams as a bar beside the client's lifeline from their open to their close, each
  checkpoint (levels 1-6) marked on the row of the event that reached it, and the
  level as a bar of seven steps. Rows follow the events in time order; the time axis
  gives each row's time after the first event, and a pause over a second between two
  rows is drawn as a break that names its length. Every element carries a class and
  ``data-`` attributes (what a test or a stylesheet looks for); every value a client
  chose is cut and escaped (:mod:`mcp_lab.untrusted`, then XML).
- :func:`mermaid`, a mermaid ``sequenceDiagram`` of the same rows, for markdown.

Both draw at most :data:`MAX_ROWS` events and say how many they left out.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from mcp_lab import protocol, untrusted
from mcp_lab.evidence.levels import LEVELS

MAX_ROWS = 150  # events drawn at most per picture
MERMAID_ROWS = 80  # messages at most per mermaid diagram
GAP_MS = 1000  # a pause this long between two rows is drawn as a break
_LABEL_CHARS = 200  # of a label, as drawn (its client-chosen parts are cut shorter)
_METHOD_CHARS = 48
_URI_CHARS = 48
_NAME_CHARS = 48  # of the client's name and version in a lane's head

# Geometry (px).
WIDTH = 760
_AXIS_X = 64  # right edge of the time labels
_MARK_X = 72  # left edge of the checkpoint badges
_CLIENT_X = 250
_STREAM_X = _CLIENT_X + 4  # the GET stream bar, just right of the client's lifeline
_STREAM_W = 8
_LAB_X = 640
_HEAD_H = 58  # title and level bar
_LANES_Y = 66  # participant boxes
_FIRST_ROW_Y = 118
_ROW_H = 32
_BREAK_H = 18

# How the evidence names what is not a message of the client's.
_STREAM_OPENERS = frozenset({protocol.STREAM_OPEN})
_STREAM_NOTES: dict[str, str] = {
    protocol.STREAM_OPEN: "GET stream opened",
    protocol.STREAM_RESUME: "GET resuming a POST response stream (no notifications)",
    protocol.STREAM_CLOSE: "GET stream closed",
    protocol.STREAM_PRIMING: "priming event (an id, no data)",
    protocol.SESSION_END: "session ended by the lab",
    protocol.SESSION_DELETE: "session deleted by the client (DELETE)",
    protocol.LISTEN_CLOSED: "listen stream closed",
}
_CHECKPOINT_NAMES: dict[str, tuple[int, str]] = {
    lv.checkpoint: (lv.number, lv.name) for lv in LEVELS if lv.checkpoint is not None
}
_CHECKPOINT_KINDS = {"notified": "notification"}  # the others are reached by a request
_TOP_LEVEL = max(lv.number for lv in LEVELS)
_LEVEL_NAMES = {lv.number: lv.name for lv in LEVELS}


@dataclass(frozen=True)
class Row:
    """One event of the session, as the picture draws it."""

    ms: int
    direction: str
    method: str
    uri: str | None
    version: int | None
    delivered: bool | None
    error: int | None
    resumed: bool
    reason: str | None
    checkpoints: tuple[str, ...]  # reached at this event

    @property
    def kind(self) -> str:
        """``request`` (client to lab), ``notification`` (lab to client), ``stream``
        (a GET stream's open, resume, close or priming event) or ``note`` (the
        session's end, a listen stream's close)."""
        if self.method in (protocol.STREAM_OPEN, protocol.STREAM_RESUME, protocol.STREAM_CLOSE):
            return "stream"
        if self.method == protocol.STREAM_PRIMING:
            return "stream"
        if self.method in _STREAM_NOTES:
            return "note"
        return "request" if self.direction == "in" else "notification"

    @property
    def dropped(self) -> bool:
        return self.kind == "notification" and self.delivered is False

    def title(self) -> str:
        """The row's main words: the method (and the version it carries), or what a
        stream or note event means. Client-chosen parts are cut, not yet escaped."""
        if self.method in _STREAM_NOTES:
            text = _STREAM_NOTES[self.method]
            return f"{text} ({untrusted.cut(self.reason, 40)})" if self.reason else text
        method = untrusted.cut(self.method, _METHOD_CHARS)
        return method if self.version is None else f"{method} v{self.version}"

    def detail(self) -> str:
        """The row's second line: the URI, an error, a drop or a resumed stream."""
        if self.method in _STREAM_NOTES:
            return ""
        parts = [untrusted.cut(self.uri, _URI_CHARS)] if self.uri else []
        if self.error is not None:
            parts.append(f"error {self.error}")
        if self.dropped:
            parts.append("dropped: no open stream")
        elif self.resumed:
            parts.append("on a resumed stream")
        return ", ".join(parts)

    def label(self) -> str:
        """Title and detail on one line."""
        detail = self.detail()
        return f"{self.title()} {detail}" if detail else self.title()


@dataclass(frozen=True)
class Flow:
    """A session's rows, and what its picture's head says."""

    client: str
    version: str
    session: str  # its label (evidence/labels.py): every page and picture shows that
    protocol: str
    transport: str
    level: int
    rows: list[Row]
    left_out: int  # events not drawn (past MAX_ROWS)

    @property
    def start_ms(self) -> int:
        return self.rows[0].ms if self.rows else 0


def _ms(iso: object) -> int | None:
    if not isinstance(iso, str):
        return None
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round(moment.timestamp() * 1000)


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def flow_of(session: Mapping[str, Any], client: str, version: str, limit: int = MAX_ROWS) -> Flow:
    """The rows of ``session`` (one session of the report's JSON) of ``client``/``version``.
    Each checkpoint is put on the first event of its kind at its time (the notification
    for ``notified``, a request of the client's for the others)."""
    marks: dict[int, list[str]] = {}
    for key, at in (session.get("checkpoints") or {}).items():
        ms = _ms(at)
        if ms is not None and key in _CHECKPOINT_NAMES:
            marks.setdefault(ms, []).append(key)
    events = [e for e in session.get("events") or [] if isinstance(e, Mapping)]
    rows: list[Row] = []
    for event in events[:limit]:
        ms = _ms(event.get("time"))
        if ms is None:
            continue
        row = Row(
            ms=ms,
            direction=str(event.get("direction")),
            method=str(event.get("method")),
            uri=None if event.get("uri") is None else str(event.get("uri")),
            version=_int(event.get("version")),
            delivered=_bool(event.get("delivered")),
            error=_int(event.get("error")),
            resumed=event.get("resumed") is True,
            reason=None if event.get("reason") is None else str(event.get("reason")),
            checkpoints=(),
        )
        due = marks.get(ms, [])
        reached = [k for k in due if _CHECKPOINT_KINDS.get(k, "request") == row.kind]
        if reached:
            marks[ms] = [k for k in due if k not in reached]
            ordered = tuple(sorted(reached, key=lambda k: _CHECKPOINT_NAMES[k][0]))
            row = replace(row, checkpoints=ordered)
        rows.append(row)
    level = _int(session.get("level")) or 0
    return Flow(
        client=client,
        version=version,
        session=str(session.get("session", "?")),
        protocol=str(session.get("protocol", "?")),
        transport=str(session.get("transport", "?")),
        level=level,
        rows=rows,
        left_out=max(0, len(events) - limit),
    )


# -- SVG -------------------------------------------------------------------------------


def _x(text: str, limit: int = _LABEL_CHARS) -> str:
    """A value for SVG text or an attribute: cut, its control characters escaped, then
    XML-escaped (quotes too)."""
    return html.escape(untrusted.shown(text, limit), quote=True)


def _seconds(ms: int) -> str:
    return f"+{ms / 1000:.3f} s"


def _pause(ms: int) -> str:
    return f"{ms / 1000:.1f} s" if ms < 60_000 else f"{ms / 60_000:.1f} min"


@dataclass(frozen=True)
class _Placed:
    row: Row
    y: int
    gap_ms: int  # the pause before it, when drawn as a break


def _placed(rows: Sequence[Row]) -> Iterator[_Placed]:
    y = _FIRST_ROW_Y
    previous: int | None = None
    for row in rows:
        gap = 0 if previous is None else row.ms - previous
        if gap >= GAP_MS:
            y += _BREAK_H
        yield _Placed(row, y, gap if gap >= GAP_MS else 0)
        y += _ROW_H
        previous = row.ms


def session_svg(flow: Flow) -> str:
    """The picture of ``flow`` as a standalone SVG document (``<svg>`` with its own
    namespace: inline in HTML, or served as ``image/svg+xml``)."""
    placed = list(_placed(flow.rows))
    bottom = (placed[-1].y if placed else _FIRST_ROW_Y) + _ROW_H
    height = bottom + (22 if flow.left_out else 8)
    who = f"{flow.client} {flow.version}"
    title = (
        f"{who} · session {flow.session} · {flow.protocol} · {flow.transport} · "
        f"level {flow.level} {_LEVEL_NAMES.get(flow.level, '?')}"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flow" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'data-level="{flow.level}" data-session="{_x(flow.session, 80)}" '
        f'font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" font-size="11">',
        f"<title>{_x(title, 400)}</title>",
        _STYLE,
        f'<text class="title-line" x="8" y="18" font-size="13">{_x(who, _NAME_CHARS)}'
        f'<tspan class="muted"> · session {_x(flow.session, 40)} · {_x(flow.protocol, 20)}'
        f" · {_x(flow.transport, 20)}</tspan></text>",
        _level_bar(flow.level),
        *_lanes(flow, bottom),
        *_streams(placed, bottom),
    ]
    for item in placed:
        parts.extend(_row(item, flow.start_ms))
    if flow.left_out:
        parts.append(
            f'<text class="left-out muted" x="8" y="{bottom + 14}">'
            f"{flow.left_out} more event(s) not drawn (the first {len(flow.rows)} are)</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


_STYLE = """<style>
svg.flow .muted { fill: #57606a; }
svg.flow .lane-box { fill: #f6f8fa; stroke: #d0d7de; }
svg.flow .lifeline { stroke: #8c959f; stroke-dasharray: 4 3; }
svg.flow .msg line { stroke-width: 1.4; }
svg.flow .request line { stroke: #0a3069; }
svg.flow .request text, svg.flow .request .tip { fill: #0a3069; }
svg.flow .notification line { stroke: #6639ba; }
svg.flow .notification text, svg.flow .notification .tip { fill: #6639ba; }
svg.flow .dropped line, svg.flow .error line { stroke: #a40e26; }
svg.flow .dropped line { stroke-dasharray: 5 3; }
svg.flow .dropped text, svg.flow .error text, svg.flow .error .tip { fill: #a40e26; }
svg.flow .stream-bar { fill: #4ac26b; fill-opacity: 0.55; stroke: #116329; }
svg.flow .stream-bar.open-ended { stroke-dasharray: 3 2; }
svg.flow .stream-note text, svg.flow .note text { fill: #116329; }
svg.flow .stream-note circle { fill: #116329; }
svg.flow .note line { stroke: #d4a72c; stroke-dasharray: 6 3; }
svg.flow .checkpoint rect { fill: #dafbe1; stroke: #4ac26b; }
svg.flow .checkpoint text { fill: #116329; font-weight: 600; }
svg.flow .break text { fill: #57606a; font-style: italic; }
svg.flow .break line { stroke: #d0d7de; stroke-dasharray: 2 2; }
svg.flow .step { stroke: #d0d7de; }
svg.flow .step.reached { fill: #2da44e; }
svg.flow .step.missed { fill: #f6f8fa; }
</style>"""


def _level_bar(level: int) -> str:
    """Seven steps, filled up to the level; its number and name beside them."""
    steps = []
    for number in range(1, _TOP_LEVEL + 1):
        state = "reached" if number <= level else "missed"
        steps.append(
            f'<rect class="step {state}" data-step="{number}" x="{8 + (number - 1) * 30}" '
            f'y="28" width="27" height="12" rx="2"><title>level {number} '
            f"{_LEVEL_NAMES[number]}</title></rect>"
        )
    name = _LEVEL_NAMES.get(level, "?")
    return (
        f'<g class="level-bar" data-level="{level}">{"".join(steps)}'
        f'<text class="level-label" x="{8 + _TOP_LEVEL * 30 + 6}" y="38">level {level} '
        f"{name}</text></g>"
    )


def _lanes(flow: Flow, bottom: int) -> list[str]:
    out = []
    for lane, x, name in (
        ("client", _CLIENT_X, f"{flow.client} {flow.version}"),
        ("lab", _LAB_X, "mcp-subscribe-lab"),
    ):
        out.append(
            f'<g class="lane" data-lane="{lane}">'
            f'<rect class="lane-box" x="{x - 115}" y="{_LANES_Y}" width="230" height="26" rx="4"/>'
            f'<text x="{x}" y="{_LANES_Y + 17}" text-anchor="middle">{_x(name, 20)}</text>'
            f'<line class="lifeline" x1="{x}" y1="{_LANES_Y + 26}" x2="{x}" y2="{bottom}"/></g>'
        )
    return out


def _streams(placed: Sequence[_Placed], bottom: int) -> list[str]:
    """A bar per GET stream, from its open to its close (to the bottom when it was
    still open at the last event; from the top when it opened before the first)."""
    bars: list[tuple[int, int, bool]] = []
    opened: int | None = None
    for item in placed:
        if item.row.method in _STREAM_OPENERS:
            if opened is None:
                opened = item.y
        elif item.row.method == protocol.STREAM_CLOSE:
            start = opened if opened is not None else _FIRST_ROW_Y - 10
            bars.append((start, item.y, False))
            opened = None
    if opened is not None:
        bars.append((opened, bottom, True))
    return [
        f'<rect class="stream-bar{" open-ended" if ended else ""}" data-stream="{index}" '
        f'x="{_STREAM_X}" y="{top}" width="{_STREAM_W}" height="{max(2, end - top)}">'
        f"<title>GET stream {'open at the last event' if ended else 'open'}</title></rect>"
        for index, (top, end, ended) in enumerate(bars)
    ]


def _row(item: _Placed, start_ms: int) -> list[str]:
    row, y = item.row, item.y
    out = []
    if item.gap_ms:
        out.append(
            f'<g class="break" data-ms="{item.gap_ms}"><line x1="{_CLIENT_X}" y1="{y - 16}" '
            f'x2="{_LAB_X}" y2="{y - 16}"/><text x="{_AXIS_X}" y="{y - 12}" text-anchor="end">'
            f"⋯ {_pause(item.gap_ms)}</text></g>"
        )
    out.append(
        f'<text class="at muted" x="{_AXIS_X}" y="{y + 4}" text-anchor="end">'
        f"{_seconds(row.ms - start_ms)}</text>"
    )
    for index, key in enumerate(row.checkpoints):
        number, name = _CHECKPOINT_NAMES[key]
        x = _MARK_X + index * 8
        out.append(
            f'<g class="checkpoint" data-checkpoint="{key}" data-level="{number}">'
            f'<rect x="{x}" y="{y - 9}" width="112" height="16" rx="3"/>'
            f'<text x="{x + 5}" y="{y + 3}">{number} {name}</text></g>'
        )
    label, detail = _x(row.title()), _x(row.detail())
    common = f'data-method="{_x(row.method, 80)}" data-ms="{row.ms - start_ms}"'
    kind = row.kind
    if kind == "request":
        classes = "msg request" + (" error" if row.error is not None else "")
        out.append(
            f'<g class="{classes}" {common}><title>{_x(row.label(), 600)}</title>'
            f'<line x1="{_STREAM_X + _STREAM_W}" y1="{y}" x2="{_LAB_X - 2}" y2="{y}"/>'
            f"{_arrow_head(_LAB_X - 2, y, 1)}"
            f'<text x="{_STREAM_X + _STREAM_W + 6}" y="{y - 4}">{label}</text>'
            f'<text class="detail" x="{_STREAM_X + _STREAM_W + 6}" y="{y + 11}" '
            f'font-size="10">{detail}</text></g>'
        )
    elif kind == "notification":
        state = "dropped" if row.dropped else "delivered" if row.delivered else "sent"
        classes = f"msg notification {state}" + (" resumed" if row.resumed else "")
        end = _STREAM_X + _STREAM_W + (40 if row.dropped else 2)
        head = _cross(end, y) if row.dropped else _arrow_head(end, y, -1)
        out.append(
            f'<g class="{classes}" {common}><title>{_x(row.label(), 600)}</title>'
            f'<line x1="{_LAB_X}" y1="{y}" x2="{end}" y2="{y}"/>{head}'
            f'<text x="{_LAB_X - 6}" y="{y - 4}" text-anchor="end">{label}</text>'
            f'<text class="detail" x="{_LAB_X - 6}" y="{y + 11}" text-anchor="end" '
            f'font-size="10">{detail}</text></g>'
        )
    elif kind == "stream":
        out.append(
            f'<g class="stream-note" {common}><circle cx="{_STREAM_X + _STREAM_W / 2}" '
            f'cy="{y}" r="3"/><text x="{_STREAM_X + _STREAM_W + 8}" y="{y + 4}">'
            f"{label}</text></g>"
        )
    else:
        out.append(
            f'<g class="note" {common}><line x1="{_CLIENT_X}" y1="{y}" x2="{_LAB_X}" '
            f'y2="{y}"/><text x="{(_CLIENT_X + _LAB_X) // 2}" y="{y - 4}" '
            f'text-anchor="middle">{label}</text></g>'
        )
    return out


def _arrow_head(x: float, y: int, direction: int) -> str:
    """A filled arrow head at ``x`` pointing right (1) or left (-1)."""
    back = x - 8 * direction
    return f'<path class="tip" d="M{x},{y} L{back},{y - 4} L{back},{y + 4} Z"/>'


def _cross(x: float, y: int) -> str:
    """Where a dropped notification ends: a cross, short of the client."""
    return (
        f'<text class="drop-mark" x="{x - 6}" y="{y + 4}" font-size="13" font-weight="700">✗</text>'
    )


# -- mermaid ---------------------------------------------------------------------------

# What a mermaid label may hold as it is; anything else becomes an entity code
# (``#60;``): no markup, no statement separator (``;``), no comment or fence.
_MERMAID_PLAIN = re.compile(r"[A-Za-z0-9 ._/:@=+(),'-]")


def _m(text: str, limit: int = _LABEL_CHARS) -> str:
    """A value for a mermaid label: cut, control characters escaped, then every
    character outside a plain set written as an entity code."""
    return "".join(
        ch if _MERMAID_PLAIN.fullmatch(ch) else f"#{ord(ch)};"
        for ch in untrusted.shown(text, limit)
    )


def mermaid(flow: Flow, limit: int = MERMAID_ROWS) -> str:
    """A mermaid ``sequenceDiagram`` of ``flow`` (without the code fence)."""
    lines = [
        "sequenceDiagram",
        f"    participant C as {_m(f'{flow.client} {flow.version}', _NAME_CHARS)}",
        "    participant L as mcp-subscribe-lab",
        f"    Note over C,L: level {flow.level} {_LEVEL_NAMES.get(flow.level, '?')}, "
        f"{_m(flow.protocol, 20)} over {_m(flow.transport, 20)}",
    ]
    previous: int | None = None
    for row in flow.rows[:limit]:
        if previous is not None and row.ms - previous >= GAP_MS:
            lines.append(f"    Note over C,L: {_pause(row.ms - previous)} later")
        previous = row.ms
        at = _seconds(row.ms - flow.start_ms)
        kind = row.kind
        if kind == "request":
            lines.append(f"    C->>L: {_m(row.label())} ({at})")
        elif kind == "notification":
            arrow = "--x" if row.dropped else "-->>"
            lines.append(f"    L{arrow}C: {_m(row.label())} ({at})")
        elif kind == "stream":
            lines.append(f"    Note left of C: {_m(row.label())} ({at})")
        else:
            lines.append(f"    Note over C,L: {_m(row.label())} ({at})")
        for key in row.checkpoints:
            number, name = _CHECKPOINT_NAMES[key]
            lines.append(f"    Note right of L: checkpoint: level {number} {name}")
    shown = min(len(flow.rows), limit)
    more = flow.left_out + len(flow.rows) - shown
    if more:
        lines.append(f"    Note over C,L: {more} more event(s) not drawn")
    return "\n".join(lines)
