"""Scoring: how far each session and each client got, from the evidence alone.

Levels follow the lab's evidence levels (0-7). Levels 1-3 are the highest with
evidence (reading a known URI without listing it is fine). From 4 up the levels build
on each other: a level needs its own checkpoint and every one from ``read_initial``
up to it (5 a notification delivered after the session's own subscribe, 6 a re-read
after that notification). A client is scored by its best session. Level 7 (the new
content reached the model) is not observable by the server: only the clients runner,
which sees the model's requests, gives it. A scenario (:mod:`mcp_lab.scenarios`)
names the resource the levels score and adds checkpoints of its own.

This module scores a window's events: its sessions, grouped by client
(:func:`score_window`, :func:`score_clients`), and what it holds that is no client
(:class:`LeftOut`). The levels and the score records are
:mod:`mcp_lab.evidence.levels`; one session's scoring and its notes
:mod:`mcp_lab.evidence.session_scoring`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mcp_lab import protocol
from mcp_lab.contract import Event, entry_time_ms
from mcp_lab.evidence.levels import ClientScore, SessionScore
from mcp_lab.evidence.session_scoring import is_request, score_session

if TYPE_CHECKING:
    from mcp_lab.scenarios.scenario import Scenario


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
    return is_request(event) and event.method not in _NO_ASK


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
