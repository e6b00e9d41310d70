"""The evidence levels (0-7), declared once (``LEVELS``: the report JSON carries them,
and the table, the dashboard and the README's level table follow), the checkpoint that
gives each of levels 1-6 (``CHECKPOINTS``), the level a session's checkpoints earn
(:func:`level_of`: from 4 up each level builds on the ones below it), and the scores
that carry them: a session's (:class:`SessionScore`) and a client's, by its best session
(:class:`ClientScore`). Scoring a session is :mod:`mcp_lab.evidence.session_scoring`,
a window's clients :mod:`mcp_lab.evidence.scoring`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios.scenario import Check


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
    tool_calls: int = 0  # tools/call requests: evidence of use, never of a level
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
        if len(self.sessions) == 1:
            return list(self.best.notes)
        # The tool calls of every session count: a client may list in one session and
        # have its model call the tools in another.
        notes = [n for n in self.best.notes if not n.endswith(TOOL_CALLS_NOTE)]
        calls = sum(s.tool_calls for s in self.sessions)
        if calls:
            notes.append(tool_calls_note(calls))
        notes.append(f"{len(self.sessions)} sessions; scored by the best one")
        return notes


TOOL_CALLS_NOTE = "tool call(s); tool calls never raise the level"


def tool_calls_note(calls: int) -> str:
    return f"{calls} {TOOL_CALLS_NOTE}"


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
