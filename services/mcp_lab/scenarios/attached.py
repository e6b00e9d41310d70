"""``attached``: the resource is attached to the conversation (Claude Code's
``@server:uri``) instead of read with a tool. After the update, is the attachment
refreshed in the model's context (push or notice), or does the model keep version 1?"""

from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.scenarios.scenario import Play, Scenario

SCENARIO = Scenario(
    name="attached",
    summary=(
        "the resource attached to the conversation (@lab:test://review/status): after "
        "the update, does the client refresh the attachment in its model's context?"
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    play=Play(
        prompt="@lab:{uri} What is the status of this review?",
        clients=frozenset({"claude-code"}),
        attach=True,
    ),
)
