"""mcp-use (Python) reaching level 6: an ``MCPClient`` with a ``message_handler`` and a
session; the session's ``connector.client_session`` is the MCP SDK's session (mcp-use
1.7.1 installs ``mcp`` 1.x, which speaks 2025-11-25), on which
``subscribe_resource`` sends ``resources/subscribe``. The update then reaches the
``message_handler``, and the program reads again. Neither attribute is in mcp-use's
docs. The lab runs it with ``mcp-lab check --client-file
docs/examples/workarounds/mcp-use-python-subscribe.toml``."""

import asyncio
import os

from mcp.types import ResourceUpdatedNotification, ServerNotification
from mcp_use import MCPClient  # type: ignore[import-untyped]
from pydantic import AnyUrl

URI = "test://review/status"


async def main() -> None:
    updated = asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ServerNotification) and isinstance(
            message.root, ResourceUpdatedNotification
        ):
            updated.set()

    client = MCPClient(
        {"mcpServers": {"lab": {"url": os.environ["MCP_LAB_URL"]}}}, message_handler=on_message
    )
    try:
        session = await client.create_session("lab")
        print("read:", (await session.read_resource(AnyUrl(URI))).contents[0])
        await session.connector.client_session.subscribe_resource(AnyUrl(URI))
        await asyncio.wait_for(updated.wait(), 15)
        print("message_handler: resource updated")
        print("re-read:", (await session.read_resource(AnyUrl(URI))).contents[0])
    finally:
        await client.close_all_sessions()


asyncio.run(main())
