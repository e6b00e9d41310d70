"""Renderings of the scores: JSON (machines, the dashboard), a terminal table, markdown notes
(each client's best session also as a mermaid sequence diagram, :mod:`mcp_lab.evidence.picture`).
The HTML report is :mod:`mcp_lab.evidence.html_report`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp_lab import untrusted
from mcp_lab.contract import Event, entry_time_ms
from mcp_lab.evidence import picture
from mcp_lab.evidence.build import Report
from mcp_lab.evidence.labels import SessionLabels
from mcp_lab.evidence.levels import CHECKPOINTS, LEVEL_NAMES, LEVELS, SessionScore
from mcp_lab.evidence.restarts import restart_note
from mcp_lab.evidence.scoring import LeftOut
from mcp_lab.evidence.timing import lateness_ms
from mcp_lab.protocol import UNKNOWN_CLIENT
from mcp_lab.scenarios.scenario import Check

_CHECKPOINT_TITLES: dict[str, str] = {
    lv.checkpoint: lv.title or lv.name for lv in LEVELS if lv.checkpoint is not None
}


# How much of a note (lab text that may quote a client's method) a rendering shows.
_NOTE_CHARS = 300


def _shown(value: str, *, markdown: bool = False, limit: int = untrusted.TABLE_CELL_CHARS) -> str:
    """A value from the evidence (what a client chose: its name, version, methods;
    or anything written into Redis) for a table cell or a markdown line: cut, its
    control characters escaped, and for markdown its HTML and markdown syntax too
    (services/mcp_lab/untrusted.py). JSON needs none of this."""
    return untrusted.for_markdown(value, limit) if markdown else untrusted.shown(value, limit)


def levels_json() -> dict[str, Any]:
    """The level declarations as the report JSON carries them: ``levels`` (number ->
    name) and ``checkpoints`` (in level order, each with its level, name and title)."""
    return {
        "levels": {str(lv.number): lv.name for lv in LEVELS},
        "checkpoints": [
            {"key": lv.checkpoint, "level": lv.number, "name": lv.name, "title": lv.title}
            for lv in LEVELS
            if lv.checkpoint is not None
        ],
    }


def iso(ms: int | None) -> str | None:
    """ISO 8601 UTC with milliseconds, or None."""
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def clock(ms: int | None) -> str:
    """HH:MM:SS.mmm (UTC), or a dash."""
    text = iso(ms)
    return text[11:23] if text else "-"


def run_start_ms(run_id: str | None) -> int | None:
    return entry_time_ms(run_id) if run_id not in (None, "0-0") else None


def window(run_id: str | None, since_ms: int | None = None) -> str:
    """What a report covers, in words: a run, everything, or the events since a time."""
    if since_ms is not None:
        return f"events since {_stamp(since_ms)} UTC (--since)"
    if run_id in (None, "0-0"):
        return "run 0-0, from the first event recorded (before any reset)"
    return f"run {run_id}, started {_stamp(run_start_ms(run_id))} UTC"


def _stamp(ms: int | None) -> str:
    """YYYY-MM-DD HH:MM:SS.mmm (UTC)."""
    text = iso(ms)
    return text[:23].replace("T", " ") if text else "-"


def _event_json(event: Event) -> dict[str, Any]:
    return {
        "time": iso(event.ts_ms),
        "direction": event.direction,
        "method": event.method,
        "uri": event.uri,
        "version": event.version,
        "delivered": event.delivered,
        "error": event.error,
        "resumed": event.resumed,
        "reason": event.reason,
        "due": iso(event.due_ms),
        "lab_late_ms": lateness_ms(event),
    }


def _session_json(score: SessionScore, labels: SessionLabels | None = None) -> dict[str, Any]:
    return {
        "session": score.session,
        **({} if labels is None else {"label": labels(score.session)}),
        "protocol": score.protocol,
        "transport": score.transport,
        "level": score.level,
        "level_name": LEVEL_NAMES[score.level],
        "checkpoints": {name: iso(ms) for name, ms in score.checkpoints.items()},
        "reread_delay_ms": score.reread_delay_ms,
        "uri": score.uri,
        "checks": _checks_json(score.checks),
        "dropped_notifications": score.dropped_notifications,
        "notes": score.notes,
        "events": [_event_json(e) for e in score.events],
    }


def missing_note(missing: int) -> str:
    """What the report says when events of its run could not be recorded."""
    return (
        f"{missing} event(s) of this run could not be recorded (Redis unavailable): "
        "levels may be lower than what the clients did"
    )


def _restart_note(report: Report) -> str | None:
    """The note on the lab's store coming back without its data, if it did in the window."""
    return restart_note(e for c in report.clients for s in c.sessions for e in s.events)


# How many clients a note on sessions left out names (the JSON has them all).
_NAMED_AT_MOST = 5


def _counted(counts: dict[str, int]) -> str:
    """``stream/close (2), session/end``: methods (from the evidence), with their counts."""
    return ", ".join(
        untrusted.cut(method, untrusted.METHOD_CHARS) + (f" ({n})" if n > 1 else "")
        for method, n in counts.items()
    )


def _methods(events: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        counts[event.method] = counts.get(event.method, 0) + 1
    return counts


def left_out_notes(left_out: LeftOut, since_ms: int | None = None) -> list[str]:
    """What the report says of what its window holds that is no client of it: sessions
    begun before it (a client that connected before a reset, whose stream or session
    closed after it), and messages without a client's identity."""
    notes: list[str] = []
    earlier = left_out.began_earlier
    if earlier:
        where = "window" if since_ms is not None else "run"
        counts: dict[str, int] = {}
        clients: list[str] = []
        for session in earlier:
            for method, n in _methods(session.events).items():
                counts[method] = counts.get(method, 0) + n
            named = session.client != UNKNOWN_CLIENT
            who = (
                untrusted.cut(session.client, untrusted.CLIENT_NAME_CHARS)
                + "/"
                + untrusted.cut(session.client_version, untrusted.CLIENT_VERSION_CHARS)
                if named
                else "a client that never named itself here"
            )
            if who not in clients:
                clients.append(who)
        more = len(clients) - _NAMED_AT_MOST
        shown = ", ".join(clients[:_NAMED_AT_MOST]) + (f" and {more} more" if more > 0 else "")
        sessions = f"{len(earlier)} session{'s' if len(earlier) > 1 else ''}"
        notes.append(
            f"{sessions} begun before this {where} left out (not scored here: "
            f"{'their' if len(earlier) > 1 else 'its'} connect came earlier; "
            f"{'their' if len(earlier) > 1 else 'its'} only events here: {_counted(counts)}): "
            f"{shown}"
        )
    anonymous = left_out.without_identity
    if anonymous:
        total = sum(anonymous.values())
        notes.append(
            f"{total} message{'s' if total > 1 else ''} without a client's identity "
            f"(no clientInfo, no session of a named client; not a client): {_counted(anonymous)}"
        )
    return notes


def _left_out_json(report: Report) -> dict[str, Any]:
    left_out = report.left_out
    return {
        "began_earlier": [
            {"client": s.client, "version": s.client_version, "events": _methods(s.events)}
            for s in left_out.began_earlier
        ],
        "without_identity": dict(left_out.without_identity),
        "notes": left_out_notes(left_out, report.since_ms),
    }


def _checks_json(checks: list[Check]) -> list[dict[str, Any]]:
    return [
        {"key": c.key, "title": c.title, "answer": c.answer, "time": iso(c.at_ms), "ok": c.ok}
        for c in checks
    ]


def to_json(report: Report, labels: SessionLabels | None = None) -> dict[str, Any]:
    """The report as plain data (what ``--format json`` and ``/api/report`` give).

    With ``labels`` (``mcp-lab report``: the lab's, :mod:`mcp_lab.evidence.labels`)
    each session has its ``label`` beside its id, each client its ``best_label``, and
    ``label_secret`` says whose secret made them; ``/api/report`` has labels in place
    of the ids (:meth:`~mcp_lab.evidence.labels.SessionLabels.public`).

    A report of a run has ``run`` (its id and start); one made with ``--since``
    has ``since`` instead (and ``run`` null). ``missing_events``: events of the
    window that could not be recorded. ``left_out``: what the window holds that is
    no client of it (sessions begun before it, messages without a client's identity),
    with a note on each. ``lab_timing``: whether the lab sent its
    notifications when it had promised them (each event's ``due`` and
    ``lab_late_ms``; services/mcp_lab/evidence/timing.py). ``scenario``: what the lab played,
    and each client's (and session's) ``checks``: that scenario's own checkpoints."""
    since_ms, run_id = report.since_ms, report.run_id
    scenario = report.scenario
    named = {} if labels is None else {"label_secret": labels.whose}
    return {
        **named,
        "run": None
        if since_ms is not None
        else {"id": run_id, "started": iso(run_start_ms(run_id))},
        "since": iso(since_ms),
        "window": window(run_id, since_ms)
        + (
            f" (the newest {report.newest_only} events; older ones left out)"
            if report.newest_only
            else ""
        ),
        "generated": iso(report.generated_ms),
        "missing_events": report.missing,
        "store_restarted": _restart_note(report),
        "lab_timing": report.timing.as_json(),
        "left_out": _left_out_json(report),
        "scenario": {"name": scenario.name, "summary": scenario.summary, "uri": scenario.watched},
        **levels_json(),
        "clients": [
            {
                "client": c.client,
                "version": c.version,
                "level": c.level,
                "level_name": LEVEL_NAMES[c.level],
                "best_session": c.best.session,
                **({} if labels is None else {"best_label": labels(c.best.session)}),
                "checks": _checks_json(c.checks),
                "notes": c.notes,
                "sessions": [_session_json(s, labels) for s in c.sessions],
            }
            for c in report.clients
        ],
    }


def to_table(report: Report, labels: SessionLabels | None = None) -> str:
    """A terminal table: one row per client (its best session), then its sessions:
    each by its label and its id with ``labels`` (the lab's), else by its id."""
    clients, missing = report.clients, report.missing
    head = f"{window(report.run_id, report.since_ms)}, {len(clients)} client(s)"
    lines = [f"{head}, scenario {report.scenario.name}", ""]
    if missing:
        lines[-1:] = [f"note: {missing_note(missing)}", ""]
    restarted = _restart_note(report)
    if restarted:
        lines[-1:] = [f"note: {restarted}", ""]
    late = report.timing.note()
    if late:
        lines[-1:] = [f"note: {late}", ""]
    for left in left_out_notes(report.left_out, report.since_ms):
        lines[-1:] = [f"note: {_shown(left, limit=_NOTE_CHARS)}", ""]
    if not clients:
        lines.append("no client has connected in this window")
        return "\n".join(lines)
    titles = [c.title for c in clients[0].checks]
    header = [
        "client",
        "level",
        *(_CHECKPOINT_TITLES[c] for c in CHECKPOINTS),
        "re-read after",
        *titles,
    ]
    rows = [header]
    for client in clients:
        best = client.best
        by_title = {c.title: c.answer for c in client.checks}
        rows.append(
            [
                _shown(f"{client.client}/{client.version}"),
                f"{client.level} {LEVEL_NAMES[client.level]}",
                *(clock(best.checkpoints[c]) for c in CHECKPOINTS),
                _delay(best.reread_delay_ms),
                *(_shown(by_title.get(t, "-")) for t in titles),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    for client in clients:
        lines.append("")
        lines.append(f"{_shown(f'{client.client}/{client.version}')}: level {client.level}")
        for session in client.sessions:
            name, ident = _shown(session.session), ""
            if labels is not None:  # the label, as every view has it; the id, as the log
                name, ident = labels(session.session), f"id {name}, "
            lines.append(
                f"  session {name} ({ident}{_shown(session.protocol)}, "
                f"{_shown(session.transport)}): level {session.level} {LEVEL_NAMES[session.level]}"
            )
        for note in client.notes:
            lines.append(f"  - {_shown(note, limit=_NOTE_CHARS)}")
    return "\n".join(lines)


def _delay(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.3f}s"


def _yes(ms: int | None, detail: str = "") -> str:
    if ms is None:
        return "no"
    return f"yes{detail} ({clock(ms)} UTC)"


def _mermaid_of(client: str, version: str, session: SessionScore) -> str:
    """The flow of a client's best session as a mermaid sequence diagram, fenced."""
    flow = picture.flow_of(_session_json(session), client, version)
    return f"```mermaid\n{picture.mermaid(flow)}\n```"


def to_markdown(report: Report, labels: SessionLabels | None = None) -> str:
    """Compatibility notes, one block per client, filled in from the evidence; with
    ``labels``, each block names its best session by its label (never its id)."""
    clients, missing = report.clients, report.missing
    scenario = report.scenario
    blocks = [
        f"<!-- mcp-subscribe-lab {window(report.run_id, report.since_ms)}, "
        f"scenario {scenario.name} -->"
    ]
    if missing:
        blocks.append(f"> Note: {missing_note(missing)}.")
    restarted = _restart_note(report)
    if restarted:
        blocks.append(f"> Note: {restarted}.")
    late = report.timing.note()
    if late:
        blocks.append(f"> Note: {late}.")
    for left in left_out_notes(report.left_out, report.since_ms):
        blocks.append(f"> Note: {_shown(left, markdown=True, limit=_NOTE_CHARS)}.")
    for client in clients:
        best = client.best
        marks = best.checkpoints
        sessions = len(client.sessions)
        connection = (
            f"yes, {_shown(best.protocol, markdown=True)} over "
            f"{_shown(best.transport, markdown=True)}"
            f" ({sessions} session{'s' if sessions > 1 else ''})"
            if marks["connected"]
            else "no initialize or server/discover recorded"
        )
        received = _yes(marks["notified"], ", on an open stream")
        if marks["notified"] is None and best.dropped_notifications:
            received = f"no: {best.dropped_notifications} sent but dropped (no open GET stream)"
        reread = _yes(marks["re_read"], ", at the notified version or later")
        if best.reread_delay_ms is not None:
            reread += f", {_delay(best.reread_delay_ms)} after the notification"
        notes = "; ".join(
            [
                f"level {client.level} ({LEVEL_NAMES[client.level]})",
                *(_shown(note, markdown=True, limit=_NOTE_CHARS) for note in client.notes),
            ]
        )
        name = _shown(client.client, markdown=True, limit=untrusted.CLIENT_NAME_CHARS)
        version = _shown(client.version, markdown=True, limit=untrusted.CLIENT_VERSION_CHARS)
        own = [
            f"- {c.title} ({scenario.name}): {_shown(c.answer, markdown=True, limit=_NOTE_CHARS)}"
            + (f" ({clock(c.at_ms)} UTC)" if c.at_ms is not None else "")
            for c in client.checks
        ]
        blocks.append(
            "\n".join(
                [
                    f"## {name} {version}",
                    "",
                    f"- MCP connection: {connection}",
                    f"- Calls resources/list? {_yes(marks['discovered'])}",
                    f"- Calls resources/read? {_yes(marks['read_initial'], ', version 1')}",
                    f"- Calls resources/subscribe? {_yes(marks['subscribed'])}",
                    f"- Receives notifications/resources/updated? {received}",
                    f"- Re-reads after the update? {reread}",
                    *own,
                    f"- Notes: {notes}",
                    *([] if labels is None else [f"- Session: {labels(best.session)}"]),
                    "",
                    _mermaid_of(client.client, client.version, best),
                ]
            )
        )
    if not clients:
        blocks.append("No client has connected in this window.")
    return "\n\n".join(blocks) + "\n"
