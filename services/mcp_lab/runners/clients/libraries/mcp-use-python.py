"""mcp-use (Python) as its docs show an application: an ``MCPClient`` from an
``mcpServers`` config (a URL, or a command for stdio), a session per server, and the
client's ``message_handler`` callback, where an update would arrive. Its sessions offer
no subscribe, so the program lists, reads, waits a bounded time for that callback and
reads again. Run by the lab: it finds the lab in MCP_LAB_URL or MCP_LAB_SERVER_COMMAND."""

import asyncio
import os
import shlex
from importlib.metadata import version
from typing import Any

from mcp.types import ResourceUpdatedNotification, ServerNotification, TextResourceContents
from mcp_use import MCPClient  # type: ignore[import-untyped]
from mcp_use.client.session import MCPSession  # type: ignore[import-untyped]
from pydantic import AnyUrl

URI = "test://review/status"
WAIT_SECONDS = 8
LIBRARY = f"mcp-use {version('mcp-use')}"


def server() -> dict[str, Any]:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return {"command": argv[0], "args": argv[1:], "env": dict(os.environ)}
    return {"url": os.environ["MCP_LAB_URL"]}


async def text(session: MCPSession) -> str:
    content = (await session.read_resource(AnyUrl(URI))).contents[0]
    return content.text if isinstance(content, TextResourceContents) else "(blob)"


async def main() -> None:
    arrived = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ServerNotification) and isinstance(
            message.root, ResourceUpdatedNotification
        ):
            arrived.set()

    client = MCPClient({"mcpServers": {"lab": server()}}, message_handler=on_message)
    try:
        session = await client.create_session("lab")
        assert session is not None, "mcp-use made no session"
        listed = [str(r.uri) for r in await session.list_resources()]
        assert URI in listed, f"{URI} is not listed: {listed}"
        print("read:", await text(session))
        print(
            f"{LIBRARY}: no subscribe API;"
            f" waiting {WAIT_SECONDS} s for message_handler, then re-reading"
        )
        try:
            await asyncio.wait_for(arrived.wait(), WAIT_SECONDS)
            print("message_handler: resource updated")
        except TimeoutError:
            print(f"message_handler: nothing in {WAIT_SECONDS} s")
        print("re-read:", await text(session))
    finally:
        await client.close_all_sessions()


asyncio.run(main())
