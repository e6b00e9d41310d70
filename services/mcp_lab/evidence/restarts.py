"""A Redis that came back without its data, as the evidence tells it.

When the lab's store restarts empty, the evidence recorded until then is gone with
it, and the server writes its subscriptions again (:mod:`mcp_lab.server.restore`),
recording one ``subscription/restored`` event per subscription: it counts as that
session's subscribe (:mod:`mcp_lab.evidence.session_scoring`), and the report notes
the restart (:func:`restart_note`) from these events alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from mcp_lab.contract import Event

# The method of the event recorded for each subscription a restore wrote again
# (direction "out": the lab did it, not the client; its version: what the session
# had been told of).
RESTORED = "subscription/restored"


def restart_note(events: Iterable[Event]) -> str | None:
    """What the report says of the restores among ``events`` (None: there was none)."""
    restored = [e for e in events if e.method == RESTORED and e.direction == "out"]
    if not restored:
        return None
    times = sorted({e.ts_ms for e in restored})
    sessions = len({e.session for e in restored})
    when = ", ".join(_clock(ms) for ms in times[:3]) + (" ..." if len(times) > 3 else "")
    again = f" ({len(times)} times)" if len(times) > 1 else ""
    return (
        f"the lab's store (Redis) came back without its data at {when}{again}: the server "
        f"restored {len(restored)} subscription(s) of {sessions} session(s), and their "
        "updates were queued again; the evidence recorded before then is lost, so "
        "levels may be lower than what the clients did"
    )


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S UTC")
