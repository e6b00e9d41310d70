"""An MCP client with the ideal subscription flow (Python SDK ``mcp`` 2.x, 2026-07-28):
list, read, ``Client.listen`` for the resource, wait for its update, read again. Over
http: ideal_client.py URL; over stdio: ideal_client.py --stdio 'SERVER COMMAND'; with
no argument, what the lab puts in its environment (MCP_LAB_URL, or
MCP_LAB_SERVER_COMMAND)."""

import os
import shlex
import sys

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

URI = "test://review/status"
INFO = mcp_types.Implementation(name="ideal-client", version="1.0")


async def flow(server: str | StdioServerParameters) -> None:
    async with Client(server, client_info=INFO) as client:
        assert URI in [str(r.uri) for r in (await client.list_resources()).resources]
        print((await client.read_resource(URI)).contents[0].text)
        async with client.listen(resource_subscriptions=[URI]) as subscription:
            with anyio.fail_after(30):
                async for event in subscription:
                    if isinstance(event, ResourceUpdated) and event.uri == URI:
                        break
        print((await client.read_resource(URI)).contents[0].text)


def server_of(args: list[str]) -> str | StdioServerParameters:
    if not args:  # run by the lab (a client file): it says where it is
        command = os.environ.get("MCP_LAB_SERVER_COMMAND")
        args = ["--stdio", command] if command else [os.environ["MCP_LAB_URL"]]
    if args[0] == "--stdio":
        command = shlex.split(args[1])
        return StdioServerParameters(command=command[0], args=command[1:])
    return args[0]


anyio.run(flow, server_of(sys.argv[1:]))
