"""``template``: the resources come from a template, ``test://review/{id}``; the client
finds it (``resources/templates/list``), reads one concrete URI, subscribes to it,
and should be notified and read it again like any resource."""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_ITEM, Catalog
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Check, Play, Scenario

EXAMPLE = "test://review/42"


def _checks(events: list[Event], uri: str) -> list[Check]:
    listed = next((e.ts_ms for e in events if checks.ok_in(e, protocol.TEMPLATES_LIST)), None)
    concrete = REVIEW_ITEM.match(uri) is not None
    subscribed = checks.subscribed_at(events, uri) if concrete else None
    return [
        Check(
            "templates_listed", "templates listed", "yes" if listed else "no", listed, bool(listed)
        ),
        Check(
            "concrete_subscribed",
            "subscribed to its resource",
            uri if subscribed else "no",
            subscribed,
            bool(subscribed),
        ),
    ]


SCENARIO = Scenario(
    name="template",
    summary=(
        "a resource template, test://review/{id}: does the client find it, and subscribe "
        "to one of its resources (test://review/42) like to any other?"
    ),
    catalog=Catalog([], templates=[REVIEW_ITEM]),
    watched=REVIEW_ITEM.uri_template,
    example_uri=EXAMPLE,
    checks=_checks,
    play=Play(list_templates=True),
)
