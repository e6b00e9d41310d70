"""Scoring one session from its events alone: its checkpoints (when it connected,
listed, first read the scored resource, subscribed, was notified after its own
subscribe, read again after that), what else its evidence shows (notifications
dropped, resumed or delivered before its subscribe, polling, tool calls, a server
that ended it), and the notes that say so, among them why a session stopped at levels
1-3 (a listen that never named the resource, a GET stream that broke after a priming
event, no GET stream, a subscribe that failed). :func:`score_session` gives its
:class:`~mcp_lab.evidence.levels.SessionScore`; a window's clients are
:mod:`mcp_lab.evidence.scoring`.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import (
    REASON_IDLE,
    REASON_REPLICA_GONE,
    REASON_UNADVERTISED,
    SUBSCRIPTION_LIMIT_ERROR,
    Event,
    Transport,
)
from mcp_lab.evidence import timing
from mcp_lab.evidence.levels import (
    CHAINED_FROM,
    CHECKPOINTS,
    LEVEL_7_UNSEEN,
    SessionScore,
    tool_calls_note,
)
from mcp_lab.evidence.restarts import RESTORED

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
        elif _ok(event, "in", _SUBSCRIBE_METHODS, uri) or _ok(event, "out", {RESTORED}, uri):
            # A restored subscription (written again into a Redis that came back without
            # its data, the subscribe's own record lost with it) counts as the subscribe.
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
    score.tool_calls = tools
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
    if any(e.method == RESTORED and e.uri == score.uri for e in score.events):
        notes.append(
            "its subscription was restored after the lab's store (Redis) came back without "
            "its data: what the session did before then is not in the evidence"
        )
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
        notes.append(tool_calls_note(tools))
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
        requests = [e for e in events if is_request(e)]
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


def is_request(event: Event) -> bool:
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
        elif is_request(event):
            primed = None
        elif event.direction == "in" and event.method == STREAM_CLOSE and primed is not None:
            if event.ts_ms - primed <= BROKE_WITHIN_MS:
                return event.ts_ms - primed
            primed = None
    return None
