"""``unsubscribe``: two updates, a few seconds apart. Does the client unsubscribe
(or end its session) once it is done, and does the lab then stop notifying it?"""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Action, Check, Play, Scenario

INTERVAL_SECONDS = 4.0


def _left(events: list[Event], uri: str) -> tuple[str, int] | None:
    """How and when the session stopped its subscription, after making it."""
    start = checks.subscribed_at(events, uri)
    if start is None:
        return None
    for event in events:
        if event.ts_ms < start:
            continue
        if checks.ok_in(event, protocol.UNSUBSCRIBE, uri):
            return protocol.UNSUBSCRIBE, event.ts_ms
        if checks.ok_in(event, protocol.SESSION_DELETE):
            return "DELETE of its session", event.ts_ms
        if checks.ok_in(event, protocol.LISTEN_CLOSED):
            return "closed its listen stream", event.ts_ms
    return None


def _checks(events: list[Event], uri: str) -> list[Check]:
    left = _left(events, uri)
    if left is None:
        return [Check("unsubscribed", "unsubscribed", "no")]
    how, at = left
    after = [e for e in checks.delivered(events, checks.UPDATED, uri) if e.ts_ms > at]
    return [
        Check("unsubscribed", "unsubscribed", f"yes ({how})", at, True),
        Check(
            "quiet_after",
            "notified after",
            str(len(after)),
            after[0].ts_ms if after else None,
            not after,
        ),
    ]


SCENARIO = Scenario(
    name="unsubscribe",
    summary=(
        "two updates, a few seconds apart: does the client unsubscribe (or end its "
        "session) when it is done, and does the lab stop notifying it then?"
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    timeline=(Action(), Action(after=INTERVAL_SECONDS)),
    checks=_checks,
    play=Play(unsubscribe_after=1),
)
