"""The lab's own timing: was each notification sent when the lab had promised it?

A notification the updater produced carries its due time (the job's entry time plus
its delay, ``contract.Event.due_ms``); sent minus due is the lab's lateness, which
a client's "notified N s after the subscribe" includes. The report states it, per
session when it is late and for the whole window, so a late lab is never read as a
slow client. Hand-made publishes and reconciles promise no time: not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mcp_lab.contract import Event

# A notification sent this much after its due time counts as late.
LATE_MS = 1000


def lateness_ms(event: Event) -> int | None:
    """How long after its due time the lab sent ``event`` (None: not a notification
    with a promised time)."""
    if event.direction != "out" or event.due_ms is None:
        return None
    return event.ts_ms - event.due_ms


@dataclass(frozen=True, slots=True)
class LabTiming:
    """The lab's lateness over the notifications of a window that had a due time."""

    notifications: int
    late: int  # sent more than LATE_MS after due
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None

    @property
    def was_late(self) -> bool:
        return self.late > 0

    def note(self) -> str | None:
        """What the report says when the lab was late (None when it was not)."""
        if not self.was_late or self.max_ms is None:
            return None
        return (
            f"the lab was late: {self.late} of {self.notifications} notification(s) went out "
            f"more than {LATE_MS / 1000:g} s after they were due (worst {self.max_ms / 1000:.2f} "
            "s); in this window a client's time to a notification includes the lab's own delay"
        )

    def as_json(self) -> dict[str, int | bool | None]:
        return {
            "notifications": self.notifications,
            "late": self.late,
            "late_after_ms": LATE_MS,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "was_late": self.was_late,
        }


def lab_timing(events: Iterable[Event]) -> LabTiming:
    """The lab's lateness over ``events`` (the notifications with a due time)."""
    samples = sorted(ms for e in events if (ms := lateness_ms(e)) is not None)
    if not samples:
        return LabTiming(0, 0, None, None, None)

    def at(q: float) -> int:
        return samples[min(len(samples) - 1, int(len(samples) * q))]

    late = sum(1 for ms in samples if ms > LATE_MS)
    return LabTiming(len(samples), late, at(0.5), at(0.99), samples[-1])


def session_note(events: Iterable[Event]) -> str | None:
    """A session's note when the lab sent one of its notifications late."""
    worst = max((ms for e in events if (ms := lateness_ms(e)) is not None), default=None)
    if worst is None or worst <= LATE_MS:
        return None
    return (
        f"the lab sent a notification {worst / 1000:.2f} s after it was due: that much of "
        "the time to it is the lab's, not the client's"
    )
