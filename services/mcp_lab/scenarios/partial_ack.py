"""``partial-ack``: two resources, and the 2026-07-28 client asks to watch both in its
listen; the lab's acknowledgement honours only one (test://review/notes is absent from
its ``resourceSubscriptions``: "a URI it will not watch is simply absent",
``basic/patterns/subscriptions.mdx``). Does the client notice, and read the unwatched
resource itself (nothing will tell it when that one changes)? The watched one still
gets its update, scored by the levels as usual.

From the wire the check sees the client's reads of the unwatched resource after its
listen opened; the lab records each URI its acknowledgement left out, so a client whose
listens never named the second URI (nothing was left out for it) is "not asked", which
``check --format checks`` reports as NOT_TESTABLE. A 2025-era client
(``resources/subscribe``, no acknowledgement) gets "not supported", which is no failure.
"""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_NOTES, REVIEW_STATUS, Catalog
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Check, Play, Scenario

UNWATCHED = REVIEW_NOTES.uri
READ_IT = f"read {UNWATCHED} itself after the ack left it out"


def _checks(events: list[Event], uri: str) -> list[Check]:
    opened = next(
        (e.ts_ms for e in events if checks.ok_in(e, protocol.LISTEN) and e.uri in (uri, UNWATCHED)),
        None,
    )
    if opened is None:
        if checks.subscribed_at(events, uri) is not None:  # resources/subscribe
            return [
                Check("unwatched_read", READ_IT, "not supported (resources/subscribe)", ok=True)
            ]
        return [Check("unwatched_read", READ_IT, "not subscribed")]
    left_out = any(
        e.direction == "out" and e.method == protocol.LISTEN_UNACKNOWLEDGED and e.uri == UNWATCHED
        for e in events
    )
    if not left_out:  # it never asked for the second URI: the ack left nothing out
        return [Check("unwatched_read", READ_IT, f"{checks.NOT_ASKED} (no listen named it)")]
    read = next(
        (
            e.ts_ms
            for e in events
            if e.ts_ms >= opened and checks.ok_in(e, protocol.READ, UNWATCHED)
        ),
        None,
    )
    return [Check("unwatched_read", READ_IT, "yes" if read else "no", read, read is not None)]


SCENARIO = Scenario(
    name="partial-ack",
    summary=(
        f"the client listens for two resources; the acknowledgement honours only one "
        f"({UNWATCHED} is left out): does the client notice and read that one itself?"
    ),
    catalog=Catalog([REVIEW_STATUS, REVIEW_NOTES]),
    watched=REVIEW_STATUS.uri,
    checks=_checks,
    unacknowledged=frozenset({UNWATCHED}),
    play=Play(also_watch=(UNWATCHED,)),
)
