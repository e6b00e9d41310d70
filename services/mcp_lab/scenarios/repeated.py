"""``repeated``: three updates (versions 2, 3, 4), a few seconds apart. Scored
n/3 notifications delivered and n/3 re-reads after each: a client that reads again
once and stops is told apart from one that keeps up."""

from __future__ import annotations

from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Action, Check, Scenario

UPDATES = 3
INTERVAL_SECONDS = 3.0


def _checks(events: list[Event], uri: str) -> list[Check]:
    notes = checks.updates_after_subscribe(events, uri)[:UPDATES]
    rereads = [at for at in checks.rereads_after_each(events, uri, notes) if at is not None]
    return [
        Check(
            "notified_each",
            "notified",
            checks.fraction(len(notes), UPDATES),
            notes[-1].ts_ms if notes else None,
            len(notes) == UPDATES,
        ),
        Check(
            "re_read_each",
            "re-read after each",
            checks.fraction(len(rereads), UPDATES),
            rereads[-1] if rereads else None,
            len(rereads) == UPDATES,
        ),
    ]


SCENARIO = Scenario(
    name="repeated",
    summary=(
        f"{UPDATES} updates, {INTERVAL_SECONDS:g} s apart: is each one delivered, and does "
        "the client read again after each, not only after the first?"
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    timeline=tuple(Action(after=i * INTERVAL_SECONDS) for i in range(UPDATES)),
    checks=_checks,
)
