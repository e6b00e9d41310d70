"""LangChain's MCP adapters as their docs show an application: a
``MultiServerMCPClient`` with one connection (Streamable HTTP or stdio), an explicit
session, and ``load_mcp_resources`` turning resources into LangChain ``Blob``s. The
adapters offer no subscribe and no callback for resource updates (``Callbacks`` has
logging, progress and elicitation only), so the program lists and reads, waits a
bounded time and reads again. Run by the lab: it finds the lab in MCP_LAB_URL or
MCP_LAB_SERVER_COMMAND."""

import asyncio
import os
import shlex
from importlib.metadata import version

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.resources import load_mcp_resources
from langchain_mcp_adapters.sessions import Connection

URI = "test://review/status"
WAIT_SECONDS = 8
LIBRARY = f"langchain-mcp-adapters {version('langchain-mcp-adapters')}"


def connection() -> Connection:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return {"transport": "stdio", "command": argv[0], "args": argv[1:], "env": dict(os.environ)}
    return {"transport": "streamable_http", "url": os.environ["MCP_LAB_URL"]}


async def main() -> None:
    client = MultiServerMCPClient({"lab": connection()})
    async with client.session("lab") as session:
        blobs = await load_mcp_resources(session)  # lists, then reads each resource
        status = [b for b in blobs if str(b.metadata.get("uri")) == URI]
        assert status, f"{URI} is not listed: {[str(b.metadata.get('uri')) for b in blobs]}"
        print("read:", status[0].as_string())
        print(f"{LIBRARY}: no subscribe API and no update callback; re-read after {WAIT_SECONDS} s")
        await asyncio.sleep(WAIT_SECONDS)  # nothing to wait on: the adapters surface no update
        again = await load_mcp_resources(session, uris=URI)
        print("re-read:", again[0].as_string())


asyncio.run(main())
