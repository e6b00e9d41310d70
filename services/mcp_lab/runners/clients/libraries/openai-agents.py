"""The OpenAI Agents SDK as its docs show an application: an ``MCPServerStreamableHttp``
or ``MCPServerStdio`` (the servers an ``Agent`` takes in ``mcp_servers``), with a
``message_handler`` where an update would arrive. The server object offers
``list_resources`` and ``read_resource`` but no subscribe, so the program lists, reads,
waits a bounded time for the handler and reads again. No model is driven: an Agent gets
the server's tools only. Run by the lab: it finds the lab in MCP_LAB_URL or
MCP_LAB_SERVER_COMMAND."""

import asyncio
import os
import shlex
from importlib.metadata import version
from typing import Any

import mcp_types
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp

URI = "test://review/status"
WAIT_SECONDS = 8
TIMEOUT_SECONDS = 30  # the lab as a stdio server may take longer than the default 5 s to start
LIBRARY = f"openai-agents {version('openai-agents')}"


def server(on_message: Any) -> MCPServerStdio | MCPServerStreamableHttp:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return MCPServerStdio(
            {"command": argv[0], "args": argv[1:], "env": dict(os.environ)},
            name="lab",
            client_session_timeout_seconds=TIMEOUT_SECONDS,
            message_handler=on_message,
        )
    return MCPServerStreamableHttp(
        {"url": os.environ["MCP_LAB_URL"]},
        name="lab",
        client_session_timeout_seconds=TIMEOUT_SECONDS,
        message_handler=on_message,
    )


async def text(lab: MCPServer) -> str:
    content = (await lab.read_resource(URI)).contents[0]
    return content.text if isinstance(content, mcp_types.TextResourceContents) else "(blob)"


async def main() -> None:
    arrived = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            arrived.set()

    async with server(on_message) as lab:
        listed = [str(r.uri) for r in (await lab.list_resources()).resources]
        assert URI in listed, f"{URI} is not listed: {listed}"
        print("read:", await text(lab))
        print(
            f"{LIBRARY}: no subscribe API;"
            f" waiting {WAIT_SECONDS} s for message_handler, then re-reading"
        )
        try:
            await asyncio.wait_for(arrived.wait(), WAIT_SECONDS)
            print("message_handler: resource updated")
        except TimeoutError:
            print(f"message_handler: nothing in {WAIT_SECONDS} s")
        print("re-read:", await text(lab))


asyncio.run(main())
