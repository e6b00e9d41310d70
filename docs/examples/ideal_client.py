"""An MCP client with the ideal subscription flow (Python SDK): list, read, subscribe,
wait for notifications/resources/updated, read again. Over http: ideal_client.py URL;
over stdio: ideal_client.py --stdio 'SERVER COMMAND'; with no argument, what the lab
puts in its environment (MCP_LAB_URL, or MCP_LAB_SERVER_COMMAND)."""

import os
import shlex
import sys
from typing import Any

import anyio
import mcp_types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

URI = "test://review/status"


async def flow(read: Any, write: Any) -> None:
    updated = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.set()

    info = mcp_types.Implementation(name="ideal-client", version="1.0")
    async with ClientSession(read, write, message_handler=on_message, client_info=info) as s:
        await s.initialize()
        assert URI in [str(r.uri) for r in (await s.list_resources()).resources]
        print((await s.read_resource(URI)).contents[0].text)
        await s.subscribe_resource(URI)
        with anyio.fail_after(30):
            await updated.wait()
        print((await s.read_resource(URI)).contents[0].text)


async def main(args: list[str]) -> None:
    if not args:  # run by the lab (a client file): it says where it is
        command = os.environ.get("MCP_LAB_SERVER_COMMAND")
        args = ["--stdio", command] if command else [os.environ["MCP_LAB_URL"]]
    if args[0] == "--stdio":
        command = shlex.split(args[1])
        server = StdioServerParameters(command=command[0], args=command[1:])
        async with stdio_client(server) as (read, write):
            await flow(read, write)
    else:
        async with streamable_http_client(args[0]) as (read, write):
            await flow(read, write)


anyio.run(main, sys.argv[1:])
