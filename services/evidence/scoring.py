"""Scoring: how far each session and each client got, from the evidence alone.

Levels follow the lab's evidence levels (0-7). A session reaches the highest
level whose evidence is recorded; a client is scored by its best session.
Level 7 (the new content reached the model) is not observable by the server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from services.contract import STATUS_URI, Event

LEVEL_NAMES: dict[int, str] = {
    0: "no connection",
    1: "connected",
    2: "discovered",
    3: "read initial",
    4: "subscribed",
    5: "notified",
    6: "re-read",
    7: "reflected",
}
# The checkpoint that gives each level from 1 to 6.
CHECKPOINTS: tuple[str, ...] = (
    "connected",
    "discovered",
    "read_initial",
    "subscribed",
    "notified",
    "re_read",
)
UPDATED = "notifications/resources/updated"
_CONNECT_METHODS = frozenset({"initialize", "server/discover"})
_SUBSCRIBE_METHODS = frozenset({"resources/subscribe", "subscriptions/listen"})
SESSION_END = "session/end"


@dataclass
class SessionScore:
    session: str
    client: str
    client_version: str
    protocol: str
    transport: str
    checkpoints: dict[str, int | None]
    dropped_notifications: int = 0
    resumed_notifications: int = 0
    initial_version: int | None = None
    # Why the server ended the session, when it did (``idle``).
    ended_by_server: str | None = None
    notes: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @property
    def level(self) -> int:
        reached = [i + 1 for i, name in enumerate(CHECKPOINTS) if self.checkpoints[name]]
        return max(reached, default=0)

    @property
    def reread_delay_ms(self) -> int | None:
        notified, reread = self.checkpoints["notified"], self.checkpoints["re_read"]
        return reread - notified if notified is not None and reread is not None else None


@dataclass
class ClientScore:
    client: str
    version: str
    sessions: list[SessionScore]

    @property
    def best(self) -> SessionScore:
        """The session that got furthest (the earliest one among equals)."""
        return max(self.sessions, key=lambda s: (s.level, -s.events[0].ts_ms))

    @property
    def level(self) -> int:
        return self.best.level

    @property
    def notes(self) -> list[str]:
        notes = list(self.best.notes)
        if len(self.sessions) > 1:
            notes.append(f"{len(self.sessions)} sessions; scored by the best one")
        return notes


def _ok(event: Event, direction: str, methods: Iterable[str], uri: str | None = None) -> bool:
    return (
        event.direction == direction
        and event.method in methods
        and event.error is None
        and (uri is None or event.uri == uri)
    )


def score_session(events: list[Event], uri: str = STATUS_URI) -> SessionScore:
    """Score one session's events (all of one session id)."""
    ordered = sorted(events, key=lambda e: e.ts_ms)
    first = ordered[0]
    named = next((e for e in ordered if e.client != "unknown"), first)
    marks: dict[str, int | None] = dict.fromkeys(CHECKPOINTS)
    score = SessionScore(
        session=first.session,
        client=named.client,
        client_version=named.client_version,
        protocol=named.protocol,
        transport=named.transport,
        checkpoints=marks,
        events=ordered,
    )
    polled: list[Event] = []
    tools = 0
    notified_version = 2
    for event in ordered:
        if _ok(event, "in", _CONNECT_METHODS):
            marks["connected"] = marks["connected"] or event.ts_ms
        elif _ok(event, "in", {"resources/list"}):
            marks["discovered"] = marks["discovered"] or event.ts_ms
        elif _ok(event, "in", {"resources/read"}, uri) and event.version is not None:
            if marks["notified"] is None:
                # The first read, usually version 1 (later in shared scope).
                if marks["read_initial"] is None:
                    marks["read_initial"] = event.ts_ms
                    score.initial_version = event.version
                elif event.version > (score.initial_version or 1):
                    polled.append(event)
            elif event.version >= notified_version:
                marks["re_read"] = marks["re_read"] or event.ts_ms
        elif _ok(event, "in", _SUBSCRIBE_METHODS, uri):
            marks["subscribed"] = marks["subscribed"] or event.ts_ms
        elif _ok(event, "out", {UPDATED}, uri):
            if event.delivered and marks["notified"] is None:
                marks["notified"] = event.ts_ms
                # A hand-made publish notifies without a new version; a read at
                # the version current then is still a re-read.
                notified_version = event.version if event.version is not None else 2
            elif not event.delivered:
                score.dropped_notifications += 1
            if event.resumed:
                score.resumed_notifications += 1
        elif _ok(event, "in", {"tools/call"}):
            tools += 1
        elif event.direction == "out" and event.method == SESSION_END:
            score.ended_by_server = event.reason
    score.notes = _notes(score, polled, tools)
    return score


def _notes(score: SessionScore, polled: list[Event], tools: int) -> list[str]:
    marks = score.checkpoints
    notes: list[str] = []
    missing = [name for name in CHECKPOINTS[: score.level] if marks[name] is None]
    if missing:
        notes.append(f"reached level {score.level} without: {', '.join(missing)}")
    if score.initial_version not in (None, 1):
        notes.append(f"first read saw version {score.initial_version} (shared scope?)")
    if marks["subscribed"] is None and marks["read_initial"]:
        notes.append("read the resource but never subscribed")
    if score.resumed_notifications:
        found_none = (
            f"; {score.dropped_notifications} found no open stream when sent"
            if score.dropped_notifications
            else ""
        )
        notes.append(
            f"{score.resumed_notifications} notification(s) delivered on a stream the client "
            f"resumed with Last-Event-ID{found_none}"
        )
    elif score.dropped_notifications:
        notes.append(
            f"{score.dropped_notifications} notification(s) dropped: "
            "no open stream to carry them (no GET stream open)"
        )
    if marks["subscribed"] and marks["notified"] is None and not score.dropped_notifications:
        notes.append(
            "subscribed; no notification delivered (the update may still be pending, "
            "or the session ended first)"
        )
    if marks["notified"] and marks["re_read"] is None:
        notes.append("notified but never re-read")
    if polled:
        notes.append(
            f"read version {polled[0].version} without a delivered notification before it "
            "(polling, or another session's update)"
        )
    if tools:
        notes.append(f"{tools} tool call(s); tool calls never raise the level")
    if score.ended_by_server == "idle":
        notes.append(
            "never closed its session (no DELETE): the server closed it after "
            "MCP_TEST_SESSION_IDLE_SECONDS without a request or an open stream"
        )
    if score.level == 6:
        notes.append("whether the new content reached the model (level 7) is not visible here")
    return notes


def score_clients(events: Iterable[Event]) -> list[ClientScore]:
    """Score every client seen in ``events``, best level first."""
    by_session: dict[str, list[Event]] = {}
    for event in events:
        by_session.setdefault(event.session, []).append(event)
    by_client: dict[tuple[str, str], list[SessionScore]] = {}
    for session_events in by_session.values():
        session = score_session(session_events)
        by_client.setdefault((session.client, session.client_version), []).append(session)
    clients = [
        ClientScore(name, version, sorted(sessions, key=lambda s: s.events[0].ts_ms))
        for (name, version), sessions in by_client.items()
    ]
    return sorted(clients, key=lambda c: (-c.level, c.client, c.version))
