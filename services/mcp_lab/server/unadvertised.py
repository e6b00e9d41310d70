"""List methods of capabilities the lab does not advertise, answered with empty lists.

The lab advertises ``resources`` only (``tools`` too with ``MCP_TEST_ENABLE_TOOL``).
Some clients call ``tools/list`` or ``prompts/list`` anyway and give up on a
server that answers -32601 (Codex CLI and Copilot CLI did), which would make
the lab score them for its own strictness. By default the lab answers those
two with empty lists, without advertising the capabilities, and logs each such
call; ``MCP_TEST_STRICT_METHODS=true`` refuses them with -32601 instead.
(``resources/templates/list`` belongs to the advertised ``resources`` and is
served as it is.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types
from fastmcp import FastMCP
from mcp.server.context import ServerRequestContext

from mcp_lab import protocol
from mcp_lab.contract import REASON_UNADVERTISED, Peer
from mcp_lab.evidence.recorder import annotate
from mcp_lab.logs import event
from mcp_lab.server import mcp_adapter

# The list method of each capability the lab may leave unadvertised: the
# capability, and the method's empty answer.
EMPTY_LISTS: dict[str, tuple[str, Callable[[], Any]]] = {
    protocol.TOOLS_LIST: ("tools", lambda: mcp_types.ListToolsResult(tools=[])),
    protocol.PROMPTS_LIST: ("prompts", lambda: mcp_types.ListPromptsResult(prompts=[])),
}


def answer_with_empty_lists(
    server: FastMCP, methods: list[str], peer_of: Callable[[ServerRequestContext[Any]], Peer]
) -> None:
    """Answer each of ``methods`` (keys of :data:`EMPTY_LISTS`) with an empty list,
    and keep its capability out of what the server advertises."""
    for method in methods:
        empty = EMPTY_LISTS[method][1]

        async def answer(
            ctx: ServerRequestContext[Any],
            _: mcp_types.PaginatedRequestParams,
            method: str = method,
            empty: Callable[[], Any] = empty,
        ) -> Any:
            event(method, "not advertised; answered with an empty list", peer_of(ctx))
            annotate(reason=REASON_UNADVERTISED)
            return empty()

        mcp_adapter.register_request_handler(
            server, method, mcp_types.PaginatedRequestParams, answer
        )
    mcp_adapter.hide_capabilities(server, [EMPTY_LISTS[m][0] for m in methods])
