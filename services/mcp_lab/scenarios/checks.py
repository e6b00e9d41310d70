"""What scenarios' own checkpoints are made of: the notifications a session was
delivered, its reads, what it did after each update. Pure functions of a session's
events (sorted by time)."""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.contract import Event

UPDATED, LIST_CHANGED = protocol.UPDATED, protocol.LIST_CHANGED
# The first words of a check's answer when the client never did what the check needs
# first (its prerequisite): ``check --format checks`` says NOT_TESTABLE for it.
NOT_ASKED = "not asked"
_SUBSCRIBES = frozenset({protocol.SUBSCRIBE, protocol.LISTEN})


def ok_in(event: Event, method: str, uri: str | None = None) -> bool:
    """A request of the client's, answered without an error (about ``uri``, when given)."""
    return (
        event.direction == "in"
        and event.method == method
        and event.error is None
        and (uri is None or event.uri == uri)
    )


def subscribed_at(events: list[Event], uri: str) -> int | None:
    """When the session first subscribed to ``uri`` (or listened for it)."""
    return next(
        (e.ts_ms for e in events if e.method in _SUBSCRIBES and ok_in(e, e.method, uri)), None
    )


def delivered(events: list[Event], method: str, uri: str | None = None) -> list[Event]:
    """The notifications ``method`` (about ``uri``) delivered to the session."""
    return [
        e
        for e in events
        if e.direction == "out"
        and e.method == method
        and e.delivered
        and (uri is None or e.uri == uri)
    ]


def updates_after_subscribe(events: list[Event], uri: str) -> list[Event]:
    """The update notifications of ``uri`` delivered after the session's subscribe."""
    start = subscribed_at(events, uri)
    if start is None:
        return []
    return [e for e in delivered(events, UPDATED, uri) if e.ts_ms >= start]


def reads(events: list[Event], uri: str) -> list[Event]:
    """The session's answered reads of ``uri`` (each with the version it got)."""
    return [e for e in events if ok_in(e, protocol.READ, uri) and e.version is not None]


def rereads_after_each(events: list[Event], uri: str, notes: list[Event]) -> list[int | None]:
    """For each notification in ``notes``, when the session read ``uri`` again after
    it and before the next one (at the notified version or later), if it did."""
    found: list[int | None] = []
    own_reads = reads(events, uri)
    for index, note in enumerate(notes):
        until = notes[index + 1].ts_ms if index + 1 < len(notes) else None
        wanted = note.version or 2
        hit = next(
            (
                r.ts_ms
                for r in own_reads
                if r.ts_ms >= note.ts_ms
                and (until is None or r.ts_ms < until)
                and (r.version or 0) >= wanted
            ),
            None,
        )
        found.append(hit)
    return found


def fraction(count: int, total: int) -> str:
    return f"{min(count, total)}/{total}"
