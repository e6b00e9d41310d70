"""Pydantic AI as its docs show an application: an ``MCPToolset`` (the toolset an
``Agent`` takes) on a URL (Streamable HTTP) or a FastMCP ``StdioTransport``, with a
``message_handler`` where an update would arrive. The toolset offers
``list_resources`` and ``read_resource`` for the application but no subscribe, so the
program lists, reads, waits a bounded time for the handler and reads again. No model is
driven: an Agent gets the server's tools only, never its resources. Run by the lab: it
finds the lab in MCP_LAB_URL or MCP_LAB_SERVER_COMMAND."""

import asyncio
import os
import shlex
from importlib.metadata import version
from typing import Any

import mcp_types
from fastmcp.client.transports import StdioTransport
from pydantic_ai.mcp import MCPToolset

URI = "test://review/status"
WAIT_SECONDS = 8
START_SECONDS = 30  # the lab as a stdio server may take longer than the default 5 s to start
LIBRARY = f"pydantic-ai {version('pydantic-ai-slim')}"


def target() -> StdioTransport | str:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return StdioTransport(command=argv[0], args=argv[1:])
    return os.environ["MCP_LAB_URL"]


async def main() -> None:
    arrived = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            arrived.set()

    toolset: MCPToolset[None] = MCPToolset(
        target(), message_handler=on_message, cache_resources=False, init_timeout=START_SECONDS
    )
    async with toolset:
        listed = [r.uri for r in await toolset.list_resources()]
        assert URI in listed, f"{URI} is not listed: {listed}"
        print("read:", await toolset.read_resource(URI))
        print(
            f"{LIBRARY}: MCPToolset has no subscribe API;"
            f" waiting {WAIT_SECONDS} s for message_handler, then re-reading"
        )
        try:
            await asyncio.wait_for(arrived.wait(), WAIT_SECONDS)
            print("message_handler: resource updated")
        except TimeoutError:
            print(f"message_handler: nothing in {WAIT_SECONDS} s")
        print("re-read:", await toolset.read_resource(URI))


asyncio.run(main())
