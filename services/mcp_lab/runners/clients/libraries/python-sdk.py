"""The MCP Python SDK (``mcp`` 2.x) as its docs show an application: ``mcp.Client`` on
a URL (Streamable HTTP) or on ``StdioServerParameters``; list, read, then wait for the
update and read again. On a 2026-07-28 connection (``mode="auto"``, the default) the
update comes from ``Client.listen(resource_subscriptions=[...])``; on an older one from
``resources/subscribe`` and the ``message_handler`` callback. Run by the lab: it finds
the lab in MCP_LAB_URL or MCP_LAB_SERVER_COMMAND."""

import os
import shlex
from importlib.metadata import version

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ListenNotSupportedError, ResourceUpdated

URI = "test://review/status"
WAIT_SECONDS = 15


def target() -> StdioServerParameters | str:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return StdioServerParameters(command=argv[0], args=argv[1:])
    return os.environ["MCP_LAB_URL"]


async def text(client: Client) -> str:
    content = (await client.read_resource(URI)).contents[0]
    return content.text if isinstance(content, mcp_types.TextResourceContents) else "(blob)"


async def main() -> None:
    updated = anyio.Event()

    async def on_message(message: object) -> None:  # the handshake-era notification
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.set()

    async with Client(target(), message_handler=on_message) as client:
        print(f"mcp {version('mcp')}: protocol {client.protocol_version}")
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert URI in listed, f"{URI} is not listed: {listed}"
        print("read:", await text(client))
        try:
            async with client.listen(resource_subscriptions=[URI]) as subscription:
                with anyio.fail_after(WAIT_SECONDS):
                    async for event in subscription:
                        if isinstance(event, ResourceUpdated) and event.uri == URI:
                            break
                print("listen: resource updated")
        except ListenNotSupportedError:  # a 2025-era connection
            await client.session.subscribe_resource(URI)
            with anyio.fail_after(WAIT_SECONDS):
                await updated.wait()
            print("message_handler: resource updated")
        print("re-read:", await text(client))


anyio.run(main)
