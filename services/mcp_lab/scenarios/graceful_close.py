"""``graceful-close``: at 2026-07-28 the lab ends the client's listen stream itself, a few
seconds after the update, with the final ``{resultType: "complete"}`` result, and then
stays quiet. Does the client take the graceful end as the end of its subscription, or
does it open a listen again (and again: a client that reconnects in a loop)?

The rule (``basic/patterns/subscriptions.mdx``, "Graceful Closure"): the final result
says the server ended the subscription on purpose; only a stream closed *without* it is
an abnormal drop that a client MAY reconnect after. So the ideal client opens no new
listen in the observation window after a graceful close: 0, and 1 is already one too
many. A 2025-era client (``resources/subscribe``, no listen stream) has nothing to close:
its check says "not supported", which is no failure.
"""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Check, ListenClose, Scenario

CLOSE = ListenClose(after=2.0, window=5.0)
RELISTENED = f"listened again within {CLOSE.window:g} s of the graceful close (ideal: 0)"


def _listened(events: list[Event]) -> list[Event]:
    return [e for e in events if checks.ok_in(e, protocol.LISTEN)]


def _checks(events: list[Event], uri: str) -> list[Check]:
    start = checks.subscribed_at(events, uri)
    if start is None:
        return [Check("stream_ended", "listen stream ended after the update", "not subscribed")]
    listened = any(e.uri == uri for e in _listened(events))
    if not listened:  # resources/subscribe: a 2025-era client, no stream to close
        return [Check("relistened", RELISTENED, "not supported (resources/subscribe)", ok=True)]
    notes = checks.updates_after_subscribe(events, uri)
    if not notes:
        return [Check("stream_ended", "listen stream ended after the update", "no (no update)")]
    notified = notes[0].ts_ms
    ended = next(
        (
            e.ts_ms
            for e in events
            if e.ts_ms >= notified and checks.ok_in(e, protocol.LISTEN_CLOSED)
        ),
        None,
    )
    if ended is None:
        return [Check("stream_ended", "listen stream ended after the update", "no")]
    until = ended + int(CLOSE.window * 1000)
    again = [e for e in _listened(events) if ended < e.ts_ms <= until]
    return [
        Check("stream_ended", "listen stream ended after the update", "yes", ended, True),
        Check(
            "relistened",
            RELISTENED,
            str(len(again)),
            again[-1].ts_ms if again else None,
            not again,
        ),
    ]


SCENARIO = Scenario(
    name="graceful-close",
    summary=(
        f"the lab ends the listen stream {CLOSE.after:g} s after the update with its final "
        '{resultType: "complete"}: does the client stop there, or listen again (in a loop)?'
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    checks=_checks,
    listen_close=CLOSE,
)
