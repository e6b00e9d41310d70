"""Pydantic AI reaching level 6 through its public API: an ``MCPToolset`` with a
``message_handler``; ``toolset.client`` is the FastMCP ``Client`` it is built on, and
``toolset.client.session`` the MCP SDK's session, on which the SDK's
``mcp.client.subscriptions.listen`` opens the 2026-07-28 subscription. The update then
reaches the ``message_handler``, and the program reads again. The lab runs it with
``mcp-lab check --client-file docs/examples/workarounds/pydantic-ai-listen.toml``."""

import asyncio
import os

import mcp_types
from mcp.client.subscriptions import listen
from pydantic_ai.mcp import MCPToolset

URI = "test://review/status"


async def main() -> None:
    updated = asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.set()

    toolset: MCPToolset[None] = MCPToolset(
        os.environ["MCP_LAB_URL"], message_handler=on_message, cache_resources=False
    )
    async with toolset:
        print("read:", await toolset.read_resource(URI))
        async with listen(toolset.client.session, resource_subscriptions=[URI]):
            await asyncio.wait_for(updated.wait(), 15)
        print("message_handler: resource updated")
        print("re-read:", await toolset.read_resource(URI))


asyncio.run(main())
