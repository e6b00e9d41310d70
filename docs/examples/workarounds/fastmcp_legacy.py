"""FastMCP's ``Client`` reaching level 6 on a 2025-era connection: ``mode="legacy"``
(the initialize handshake) and ``await client.session.subscribe_resource(uri)`` on the
MCP SDK's session (``Client.session``). The update then reaches
``MessageHandler.on_resource_updated``, and the program reads again. The SDK marks
``subscribe_resource`` deprecated (``resources/subscribe`` is gone from 2026-07-28):
the program says so rather than hiding the warning. The lab runs it with ``mcp-lab
check --client-file docs/examples/workarounds/fastmcp-legacy.toml``."""

import asyncio
import os

import mcp_types
from fastmcp import Client
from fastmcp.client.messages import MessageHandler

URI = "test://review/status"


class Updates(MessageHandler):
    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    async def on_resource_updated(self, message: mcp_types.ResourceUpdatedNotification) -> None:
        if str(message.params.uri) == URI:
            self.arrived.set()


async def main() -> None:
    updates = Updates()
    async with Client(os.environ["MCP_LAB_URL"], message_handler=updates, mode="legacy") as client:
        print("protocol:", client.protocol_version)
        print("read:", (await client.read_resource(URI))[0])
        await client.session.subscribe_resource(URI)
        await asyncio.wait_for(updates.arrived.wait(), 15)
        print("on_resource_updated: resource updated")
        print("re-read:", (await client.read_resource(URI))[0])


asyncio.run(main())
