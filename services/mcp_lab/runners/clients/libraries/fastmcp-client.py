"""FastMCP's Client as its docs show an application: ``fastmcp.Client`` on a URL
(Streamable HTTP) or a ``StdioTransport``, and a ``MessageHandler`` whose
``on_resource_updated`` hook is where an update would arrive. The Client has no
subscribe (nor a 2026-07-28 listen) of its own, so the program lists, reads, waits a
bounded time for that hook and reads again. Run by the lab: it finds the lab in
MCP_LAB_URL or MCP_LAB_SERVER_COMMAND."""

import asyncio
import os
import shlex

import fastmcp
import mcp_types
from fastmcp import Client
from fastmcp.client.messages import MessageHandler
from fastmcp.client.transports import StdioTransport

URI = "test://review/status"
WAIT_SECONDS = 8


class Updates(MessageHandler):
    def __init__(self) -> None:
        self.arrived = asyncio.Event()

    async def on_resource_updated(self, message: mcp_types.ResourceUpdatedNotification) -> None:
        if str(message.params.uri) == URI:
            self.arrived.set()


def target() -> StdioTransport | str:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return StdioTransport(command=argv[0], args=argv[1:])
    return os.environ["MCP_LAB_URL"]


async def text(client: Client) -> str:
    content = (await client.read_resource(URI))[0]
    return content.text if isinstance(content, mcp_types.TextResourceContents) else "(blob)"


async def main() -> None:
    updates = Updates()
    async with Client(target(), message_handler=updates) as client:
        print(f"fastmcp {fastmcp.__version__}: protocol {client.protocol_version}")
        listed = [str(r.uri) for r in await client.list_resources()]
        assert URI in listed, f"{URI} is not listed: {listed}"
        print("read:", await text(client))
        print(
            f"fastmcp {fastmcp.__version__}: Client has no subscribe or listen API;"
            f" waiting {WAIT_SECONDS} s for on_resource_updated, then re-reading"
        )
        try:
            await asyncio.wait_for(updates.arrived.wait(), WAIT_SECONDS)
            print("on_resource_updated: resource updated")
        except TimeoutError:
            print(f"on_resource_updated: nothing in {WAIT_SECONDS} s")
        print("re-read:", await text(client))


asyncio.run(main())
