"""FastMCP's ``Client`` reaching level 6 through its public API: the Client has no
subscribe or listen of its own, but ``Client.session`` is the MCP SDK's session, on
which the SDK's ``mcp.client.subscriptions.listen`` opens the 2026-07-28 subscription.
The update then reaches ``MessageHandler.on_resource_updated``, and the program reads
again. The lab runs it with ``mcp-lab check --client-file
docs/examples/workarounds/fastmcp-listen.toml``."""

import asyncio
import os

import mcp_types
from fastmcp import Client
from fastmcp.client.messages import MessageHandler
from mcp.client.subscriptions import listen

URI = "test://review/status"


class Updates(MessageHandler):
    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    async def on_resource_updated(self, message: mcp_types.ResourceUpdatedNotification) -> None:
        if str(message.params.uri) == URI:
            self.arrived.set()


async def main() -> None:
    updates = Updates()
    async with Client(os.environ["MCP_LAB_URL"], message_handler=updates) as client:
        print("read:", (await client.read_resource(URI))[0])
        async with listen(client.session, resource_subscriptions=[URI]):
            await asyncio.wait_for(updates.arrived.wait(), 15)
        print("on_resource_updated: resource updated")
        print("re-read:", (await client.read_resource(URI))[0])


asyncio.run(main())
