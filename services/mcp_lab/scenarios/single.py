"""``single``: the basic flow, the default. One resource, one update after the
subscribe; the levels (0-7) are the answer."""

from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.scenarios.scenario import Play, Scenario

SCENARIO = Scenario(
    name="single",
    summary=(
        "the basic flow: one update after the subscribe. Does the client subscribe, "
        "get notified, read again and bring version 2 to its model?"
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    play=Play(pull=True, tool_setups=True),
)
