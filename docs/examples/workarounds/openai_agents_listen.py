"""The OpenAI Agents SDK reaching level 6: an ``MCPServerStreamableHttp`` (a server an
``Agent`` takes in ``mcp_servers``) with a ``message_handler``; its ``session``
attribute is the MCP SDK's session, on which the SDK's
``mcp.client.subscriptions.listen`` opens the 2026-07-28 subscription. The update then
reaches the ``message_handler``, and the program reads again. The lab runs it with
``mcp-lab check --client-file docs/examples/workarounds/openai-agents-listen.toml``."""

import asyncio
import os

import mcp_types
from agents.mcp import MCPServerStreamableHttp
from mcp.client.subscriptions import listen

URI = "test://review/status"


async def main() -> None:
    updated = asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.set()

    params = {"url": os.environ["MCP_LAB_URL"]}
    async with MCPServerStreamableHttp(params, name="lab", message_handler=on_message) as lab:
        print("read:", (await lab.read_resource(URI)).contents[0])
        assert lab.session is not None, "the server has no session"
        async with listen(lab.session, resource_subscriptions=[URI]):
            await asyncio.wait_for(updated.wait(), 15)
        print("message_handler: resource updated")
        print("re-read:", (await lab.read_resource(URI)).contents[0])


asyncio.run(main())
