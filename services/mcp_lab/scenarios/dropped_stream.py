"""``dropped-stream``: at 2026-07-28 the lab drops the client's first listen stream
before its update: the stream ends *without* the final ``{resultType: "complete"}``
result (over HTTP its response ends; over stdio the server's connection ends, as a
server process that dies does). Does the client listen again, and does it then get the
update it would have missed?

The rule (``basic/patterns/subscriptions.mdx``, "Graceful Closure"): a stream closed
without the final result is an abnormal drop; the client MAY reconnect, and after a
stdio reconnect it MUST listen again. The lab keeps the client's subscription for a
minute: the update still comes at its time, and on the client's next listen the lab
tells the new stream of it (at once, when it came while the client was away). The
levels then score the rest (notified, re-read at version 2), as in every scenario. A
2025-era client (``resources/subscribe``, no listen stream) gets "not supported",
which is no failure.
"""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Action, Check, ListenDrop, Scenario

# The drop comes 0.3 s after the acknowledgement; the update 2 s past the lab's update
# delay, so that the drop is before it whatever the delay.
DROP = ListenDrop(after=0.3)
UPDATE_LATER = 2.0
DROPPED = "the lab dropped the listen stream before the update"
RELISTENED = "listened again after the drop"
KEPT = "the update reached it on the new stream"


def _checks(events: list[Event], uri: str) -> list[Check]:
    if checks.subscribed_at(events, uri) is None:
        return [Check("stream_dropped", DROPPED, "not subscribed")]
    listens = [e for e in events if checks.ok_in(e, protocol.LISTEN, uri)]
    if not listens:  # resources/subscribe: a 2025-era client, no stream to drop
        return [Check("relistened", RELISTENED, "not supported (resources/subscribe)", ok=True)]
    dropped = next(
        (e.ts_ms for e in events if e.direction == "out" and e.method == protocol.LISTEN_DROPPED),
        None,
    )
    if dropped is None:
        return [Check("stream_dropped", DROPPED, "no")]
    found = [Check("stream_dropped", DROPPED, "yes", dropped, True)]
    again = next((e.ts_ms for e in listens if e.ts_ms >= dropped), None)
    if again is None:
        return [*found, Check("relistened", RELISTENED, "no")]
    found.append(Check("relistened", RELISTENED, "yes", again, True))
    kept = next(
        (e.ts_ms for e in checks.delivered(events, checks.UPDATED, uri) if e.ts_ms >= again), None
    )
    found.append(Check("kept_update", KEPT, "yes" if kept else "no", kept, kept is not None))
    return found


SCENARIO = Scenario(
    name="dropped-stream",
    summary=(
        "the lab drops the client's listen stream without its final result, before the "
        "update: does the client listen again, and get the update it would have missed?"
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    timeline=(Action(after=UPDATE_LATER),),
    checks=_checks,
    listen_drop=DROP,
)
