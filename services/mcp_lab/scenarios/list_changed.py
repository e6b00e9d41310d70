"""``list-changed``: a second resource appears after the subscribe, announced with
``notifications/resources/list_changed``. Does the client list again, and read it?"""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_NOTES, REVIEW_STATUS, Catalog
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import ADD, Action, Check, Scenario


def _checks(events: list[Event], uri: str) -> list[Check]:
    # Sent to every session that hears list_changed, subscribed or not.
    notes = checks.delivered(events, checks.LIST_CHANGED)
    if not notes:
        return [Check("list_changed", "list_changed delivered", "no")]
    after = notes[0].ts_ms
    relisted = next(
        (e.ts_ms for e in events if e.ts_ms >= after and checks.ok_in(e, protocol.LIST)), None
    )
    read_new = next(
        (
            e.ts_ms
            for e in events
            if e.ts_ms >= after and checks.ok_in(e, protocol.READ, REVIEW_NOTES.uri)
        ),
        None,
    )
    return [
        Check("list_changed", "list_changed delivered", "yes", after, True),
        Check("relisted", "listed again", "yes" if relisted else "no", relisted, bool(relisted)),
        Check(
            "read_new", "read the new one", "yes" if read_new else "no", read_new, bool(read_new)
        ),
    ]


SCENARIO = Scenario(
    name="list-changed",
    summary=(
        "a second resource appears after the subscribe, with "
        "notifications/resources/list_changed: does the client list again and read it?"
    ),
    catalog=Catalog([REVIEW_STATUS, REVIEW_NOTES]),
    watched=REVIEW_STATUS.uri,
    timeline=(Action(kind=ADD, uri=REVIEW_NOTES.uri),),
    hidden=frozenset({REVIEW_NOTES.uri}),
    checks=_checks,
)
