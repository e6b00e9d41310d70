"""Scoring: how far each session and each client got, from the evidence alone.

Levels follow the lab's evidence levels (0-7). Levels 1-3 are the highest with
evidence (reading a known URI without listing it is fine). From 4 up the levels build
on each other: a level needs its own checkpoint and every one from ``read_initial``
up to it (5 a notification delivered after the session's own subscribe, 6 a re-read
after that notification). A client is scored by its best session. Level 7 (the new
content reached the model) is not observable by the server: only the clients runner,
which sees the model's requests, gives it. A scenario (:mod:`mcp_lab.scenarios`)
names the resource the levels score and adds checkpoints of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import (
    REASON_IDLE,
    REASON_REPLICA_GONE,
    REASON_UNADVERTISED,
    SUBSCRIPTION_LIMIT_ERROR,
    Event,
    Transport,
    entry_time_ms,
)
from mcp_lab.evidence import timing
from mcp_lab.scenarios.scenario import Check

if TYPE_CHECKING:
    from mcp_lab.scenarios.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Level:
    """One evidence level. Levels 1-6 are reached at a checkpoint of a session's
    timeline (``checkpoint``, shown as ``title`` in tables); 0 and 7 have none."""

    number: int
    name: str
    checkpoint: str | None = None
    title: str | None = None


# The levels, declared once: the report JSON carries them (``levels``,
# ``checkpoints``), and the table, the dashboard and the README's level table follow it.
LEVELS: tuple[Level, ...] = (
    Level(0, "no connection"),
    Level(1, "connected", "connected", "connect"),
    Level(2, "discovered", "discovered", "list"),
    Level(3, "read initial", "read_initial", "read v1"),
    Level(4, "subscribed", "subscribed", "subscribe"),
    Level(5, "notified", "notified", "notified"),
    Level(6, "re-read", "re_read", "re-read"),
    Level(7, "reflected"),
)
LEVEL_NAMES: dict[int, str] = {level.number: level.name for level in LEVELS}
# The checkpoint that gives each level from 1 to 6, in level order.
CHECKPOINTS: tuple[str, ...] = tuple(lv.checkpoint for lv in LEVELS if lv.checkpoint is not None)
UPDATED = protocol.UPDATED
_SUBSCRIBE_METHODS = frozenset({protocol.SUBSCRIBE, protocol.LISTEN})
# List methods of capabilities the lab does not advertise by default.
_UNADVERTISED_LISTS = (protocol.TOOLS_LIST, protocol.PROMPTS_LIST)
# Evidence of the session's GET streams (recorded by the server, not sent by the client).
STREAM_OPEN, STREAM_RESUME = protocol.STREAM_OPEN, protocol.STREAM_RESUME
STREAM_CLOSE, STREAM_PRIMING = protocol.STREAM_CLOSE, protocol.STREAM_PRIMING
_STREAM_METHODS = frozenset({STREAM_OPEN, STREAM_RESUME, STREAM_CLOSE, STREAM_PRIMING})
# A GET stream that closes this soon after a data-less event, before any
# notification, is taken as broken by it.
BROKE_WITHIN_MS = 2000
_MODERN_PROTOCOLS = frozenset({protocol.MODERN})
SESSION_END = protocol.SESSION_END
LEVEL_7_UNSEEN = "whether the new content reached the model (level 7) is not visible here"


@dataclass
class SessionScore:
    session: str
    client: str
    client_version: str
    protocol: str
    transport: str
    checkpoints: dict[str, int | None]
    uri: str = REVIEW_STATUS.uri  # the resource its levels score
    dropped_notifications: int = 0
    resumed_notifications: int = 0
    # Delivered before the session's own subscribe (not its level 5).
    unsubscribed_notifications: int = 0
    initial_version: int | None = None
    # Why the server ended the session, when it did (``idle``).
    ended_by_server: str | None = None
    notes: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # The scenario's own checkpoints (mcp_lab.scenarios), beside the levels.
    checks: list[Check] = field(default_factory=list)

    @property
    def level(self) -> int:
        return level_of(self.checkpoints)

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
    def checks(self) -> list[Check]:
        """The scenario's own checkpoints, of the best session."""
        return self.best.checks

    @property
    def notes(self) -> list[str]:
        notes = list(self.best.notes)
        if len(self.sessions) > 1:
            notes.append(f"{len(self.sessions)} sessions; scored by the best one")
        return notes


# The first level that builds on the ones below it (subscribed), and the checkpoint
# the chain starts from (read_initial, level 3).
CHAINED_FROM = 4


def level_of(marks: dict[str, int | None]) -> int:
    """The level a session's checkpoints earn: the highest of 1-3 with evidence,
    then each of 4-6 as long as its checkpoint and all below it (from 3) are there,
    in time order."""
    level = max(
        (i + 1 for i, name in enumerate(CHECKPOINTS[: CHAINED_FROM - 1]) if marks[name]),
        default=0,
    )
    if level < CHAINED_FROM - 1:
        return level
    previous = marks[CHECKPOINTS[CHAINED_FROM - 2]]
    for number in range(CHAINED_FROM, len(CHECKPOINTS) + 1):
        at = marks[CHECKPOINTS[number - 1]]
        # subscribe and the first read may come in either order; from the notification
        # on, each checkpoint follows the one below it.
        if at is None or (number > CHAINED_FROM and previous is not None and at < previous):
            break
        level, previous = number, at
    return level


def _ok(event: Event, direction: str, methods: Iterable[str], uri: str | None = None) -> bool:
    return (
        event.direction == direction
        and event.method in methods
        and event.error is None
        and (uri is None or event.uri == uri)
    )


def score_session(events: list[Event], uri: str = REVIEW_STATUS.uri) -> SessionScore:
    """Score one session's events (all of one session id)."""
    ordered = sorted(events, key=lambda e: e.ts_ms)
    first = ordered[0]
    named = next((e for e in ordered if e.client != protocol.UNKNOWN_CLIENT), first)
    marks: dict[str, int | None] = dict.fromkeys(CHECKPOINTS)
    score = SessionScore(
        session=first.session,
        client=named.client,
        client_version=named.client_version,
        protocol=named.protocol,
        transport=named.transport,
        checkpoints=marks,
        uri=uri,
        events=ordered,
    )
    polled: list[Event] = []
    tools = 0
    notified_version = 2
    for event in ordered:
        if _ok(event, "in", protocol.CONNECT_METHODS):
            marks["connected"] = marks["connected"] or event.ts_ms
        elif _ok(event, "in", {protocol.LIST}):
            marks["discovered"] = marks["discovered"] or event.ts_ms
        elif _ok(event, "in", {protocol.READ}, uri) and event.version is not None:
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
            if event.delivered and marks["notified"] is None and marks["subscribed"] is None:
                score.unsubscribed_notifications += 1  # not this session's level 5
            elif event.delivered and marks["notified"] is None:
                marks["notified"] = event.ts_ms
                # A hand-made publish notifies without a new version; a read at
                # the version current then is still a re-read.
                notified_version = event.version if event.version is not None else 2
            elif not event.delivered:
                score.dropped_notifications += 1
            if event.resumed:
                score.resumed_notifications += 1
        elif _ok(event, "in", {protocol.TOOLS_CALL}):
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
    beyond = [name for name in CHECKPOINTS[score.level :] if marks[name] is not None]
    if beyond:
        notes.append(
            f"recorded {', '.join(beyond)} but not counted ({_broken_link(score)}): "
            f"levels from {CHAINED_FROM} up build on the level below"
        )
    if score.unsubscribed_notifications:
        notes.append(
            f"{score.unsubscribed_notifications} notification(s) delivered before the "
            "session's own subscribe: not counted"
        )
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
    gone = score.ended_by_server == REASON_REPLICA_GONE
    if gone:
        notes.append(
            "its server replica died with the session (replica-gone): what came after "
            "is the lab's failure, not the client's"
        )
    elif marks["subscribed"] and marks["notified"] is None and not score.dropped_notifications:
        notes.append(
            "subscribed; no notification delivered (the update may still be pending, "
            "or the session ended first)"
        )
    if marks["notified"] and marks["re_read"] is None and not gone:
        notes.append("notified but never re-read")
    if polled:
        notes.append(
            f"read version {polled[0].version} without a delivered notification before it "
            "(polling, or another session's update)"
        )
    late = timing.session_note(score.events)
    if late:
        notes.append(late)
    if tools:
        notes.append(f"{tools} tool call(s); tool calls never raise the level")
    refused = sum(1 for e in score.events if e.error == SUBSCRIPTION_LIMIT_ERROR)
    if refused:
        notes.append(
            f"{refused} subscribe(s) refused: the session held the most subscriptions "
            "allowed (MCP_TEST_MAX_SUBSCRIPTIONS_PER_SESSION)"
        )
    if score.ended_by_server == REASON_IDLE:
        notes.append(
            "never closed its session (no DELETE): the server closed it after "
            "MCP_TEST_SESSION_IDLE_SECONDS without a request or an open stream"
        )
    if score.level == 6:
        notes.append(LEVEL_7_UNSEEN)
    notes.extend(_unadvertised_notes(score.events))
    if 1 <= score.level <= 3:
        notes.extend(_stop_notes(score))
    return notes


def _broken_link(score: SessionScore) -> str:
    """Where a session's chain of checkpoints from ``read_initial`` up breaks."""
    marks, level = score.checkpoints, score.level
    if level < CHAINED_FROM - 1:
        return f"no {CHECKPOINTS[CHAINED_FROM - 2]}"
    following = CHECKPOINTS[level]
    if marks[following] is None:
        return f"no {following}"
    return f"{following} came before {CHECKPOINTS[level - 1]}"  # checkpoints out of order


def _unadvertised_notes(events: list[Event]) -> list[str]:
    """What the client asked of capabilities the lab does not advertise."""
    answered: list[str] = []
    refused: list[str] = []
    for event in events:
        if event.direction != "in" or event.method not in _UNADVERTISED_LISTS:
            continue
        if event.reason == REASON_UNADVERTISED and event.method not in answered:
            answered.append(event.method)
        elif event.error == protocol.METHOD_NOT_FOUND and event.method not in refused:
            refused.append(event.method)
    notes: list[str] = []
    if answered:
        notes.append(
            f"asked {', '.join(answered)} (not advertised by default; answered, not refused)"
        )
    if refused:
        requests = [e for e in events if _is_request(e)]
        left = requests[-1].method in refused and requests[-1].error == protocol.METHOD_NOT_FOUND
        tail = "and left after the error" if left else "refused with -32601"
        notes.append(f"asked {', '.join(refused)} (not advertised) {tail}")
    return notes


def _stop_notes(score: SessionScore) -> list[str]:
    """Why a session stopped at level 1-3, from what its evidence shows."""
    events, notes = score.events, []
    listens = [e for e in events if _ok(e, "in", {protocol.LISTEN})]
    if listens and not any(e.uri == score.uri for e in listens):
        if all(e.uri is None for e in listens):
            notes.append("listen asked only for list-changed events, never for the resource")
        else:
            notes.append(f"listen named other resources, never {score.uri}")
    broke = _broken_after_priming(events)
    if broke is not None:
        notes.append(
            f"stream broke after a data-less event: the GET stream closed {broke} ms after "
            "a priming event, before any notification"
        )
    legacy_http = (
        score.transport == Transport.STREAMABLE_HTTP and score.protocol not in _MODERN_PROTOCOLS
    )
    methods = {e.method for e in events if e.direction == "in"}
    if legacy_http and STREAM_OPEN not in methods:
        if STREAM_RESUME in methods:
            notes.append(
                "never opened a GET stream for notifications (only GETs resuming a POST "
                "response stream)"
            )
        else:
            notes.append("never opened a GET stream")
    failed = [e for e in events if e.direction == "in" and e.method in _SUBSCRIBE_METHODS]
    failed = [e for e in failed if e.error is not None]
    if failed:
        notes.append(f"{failed[0].method} failed with error {failed[0].error}")
    elif score.checkpoints["read_initial"] is None:
        if score.protocol in _MODERN_PROTOCOLS:
            notes.append("never sent a subscriptions/listen naming the resource")
        else:
            notes.append("never sent resources/subscribe")
    return notes


def _is_request(event: Event) -> bool:
    """A request of the client (not a notification, not a stream record)."""
    return (
        event.direction == "in"
        and event.method not in _STREAM_METHODS
        and not event.method.startswith("notifications/")
    )


def _broken_after_priming(events: list[Event]) -> int | None:
    """Milliseconds from a data-less event to the close of its GET stream, when
    the stream closed within :data:`BROKE_WITHIN_MS` with neither a notification
    nor a request of the client between (a client that went on working over the
    stream, then closed it, ended its run: it did not break on the event)."""
    primed: int | None = None
    for event in events:
        if event.direction == "out" and event.method == STREAM_PRIMING:
            primed = event.ts_ms
        elif event.direction == "out" and event.method.startswith("notifications/"):
            primed = None
        elif _is_request(event):
            primed = None
        elif event.direction == "in" and event.method == STREAM_CLOSE and primed is not None:
            if event.ts_ms - primed <= BROKE_WITHIN_MS:
                return event.ts_ms - primed
            primed = None
    return None


@dataclass
class LeftOut:
    """What a window holds that is no client of it, each counted as what it is."""

    # Sessions begun before the window: here only their end (a stream or the
    # session closed), notifications, nothing the client asked. Not scored: a level
    # counts from the connect, which came earlier.
    began_earlier: list[SessionScore] = field(default_factory=list)
    # Messages of no named client and no session of one (a 2026-07-28 notification
    # carries no clientInfo): how many, per method.
    without_identity: dict[str, int] = field(default_factory=dict)


@dataclass
class Scores:
    """A window's clients (best level first) and what it holds that is no client."""

    clients: list[ClientScore]
    left_out: LeftOut


# What a client sends that ends its session or a stream, or keeps it alive, rather
# than asking for something.
_NO_ASK = frozenset({protocol.SESSION_DELETE, protocol.LISTEN_CLOSED, protocol.PING})


def _asked(event: Event) -> bool:
    """A request of the client that shows its session at work in the window (a
    connect, a list, a read...): not a notification, not a ping, not the end of a
    stream or of the session, nothing the lab recorded of its own."""
    return _is_request(event) and event.method not in _NO_ASK


def _without_identity(events: list[Event]) -> bool:
    """Messages of no client: none named one, and all are notifications the
    client side sent (a request, even a nameless one, is a client's)."""
    return all(
        e.client == protocol.UNKNOWN_CLIENT
        and e.direction == "in"
        and e.method.startswith("notifications/")
        for e in events
    )


def score_window(
    events: Iterable[Event], runs: Iterable[str] = (), scenario: Scenario | None = None
) -> Scores:
    """Score every client seen in ``events``, best level first, in ``scenario`` (the
    default one when None): each session's levels for the resource the scenario
    watches, and the scenario's own checkpoints. ``runs``: the ids of the runs that
    began inside the window (a 2026-07-28 client's timeline is cut there).

    A session that asked nothing in the window makes no client row: either it began
    before the window (here only its stream or session closing, pings, notifications
    of its own or of the lab: after a reset, or the restart of a server), or its
    messages carry no client's identity at all. Both are counted in ``left_out``."""
    if scenario is None:
        from mcp_lab.scenarios import registry

        scenario = registry.get(registry.DEFAULT)
    by_session: dict[str, list[Event]] = {}
    for event in events:
        by_session.setdefault(event.session, []).append(event)
    by_client: dict[tuple[str, str], list[SessionScore]] = {}
    left_out = LeftOut()
    for session_events in _modern_per_run(by_session, sorted(runs, key=entry_time_ms)):
        ordered = sorted(session_events, key=lambda e: e.ts_ms)
        if not any(_asked(e) for e in ordered) and _without_identity(ordered):
            for event in ordered:
                counts = left_out.without_identity
                counts[event.method] = counts.get(event.method, 0) + 1
            continue
        uri = scenario.scored_uri(ordered)
        session = score_session(ordered, uri)
        session.checks = scenario.checks(ordered, uri)
        if not any(_asked(e) for e in ordered):
            left_out.began_earlier.append(session)
            continue
        by_client.setdefault((session.client, session.client_version), []).append(session)
    clients = [
        ClientScore(name, version, sorted(sessions, key=lambda s: s.events[0].ts_ms))
        for (name, version), sessions in by_client.items()
    ]
    left_out.began_earlier.sort(key=lambda s: s.events[0].ts_ms)
    return Scores(sorted(clients, key=lambda c: (-c.level, c.client, c.version)), left_out)


def score_clients(
    events: Iterable[Event], runs: Iterable[str] = (), scenario: Scenario | None = None
) -> list[ClientScore]:
    """The clients of :func:`score_window` (what it leaves out left out)."""
    return score_window(events, runs, scenario).clients


MODERN_SESSION_PREFIX = protocol.MODERN_SESSION_PREFIX


def _modern_per_run(by_session: dict[str, list[Event]], runs: list[str]) -> Iterator[list[Event]]:
    """Each session's events; a 2026-07-28 client's cut at every run start.

    2026-07-28 has no sessions: the lab keys a modern client by its clientInfo
    (``modern:<name>/<version>``), and that key lasts across resets. Its events
    of different runs are different timelines (a reset starts it at version 1);
    the part after a run start is named ``<key>#<run id>``.
    """
    for key, events in by_session.items():
        if not key.startswith(MODERN_SESSION_PREFIX) or not runs:
            yield events
            continue
        parts: dict[str, list[Event]] = {}
        for event in events:
            run = next((r for r in reversed(runs) if entry_time_ms(r) <= event.ts_ms), None)
            name = key if run is None else f"{key}#{run}"
            parts.setdefault(name, []).append(
                event if run is None else replace(event, session=name)
            )
        yield from parts.values()
