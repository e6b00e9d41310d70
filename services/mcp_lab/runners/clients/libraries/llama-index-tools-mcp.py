"""LlamaIndex's MCP tools as their docs show an application: a ``BasicMCPClient`` on a
URL (Streamable HTTP) or a command (stdio), the client ``McpToolSpec`` turns into an
agent's tools. Each of its calls opens a session of its own (connect, initialize, one
request, close), and it has no subscribe and no notification callback, so the program
lists, reads, waits a bounded time and reads again. Run by the lab: it finds the lab in
MCP_LAB_URL or MCP_LAB_SERVER_COMMAND."""

import asyncio
import os
import shlex
from importlib.metadata import version

import mcp_types
from llama_index.tools.mcp import BasicMCPClient  # type: ignore[import-untyped]

URI = "test://review/status"
WAIT_SECONDS = 8
LIBRARY = f"llama-index-tools-mcp {version('llama-index-tools-mcp')}"


def client() -> BasicMCPClient:
    command = os.environ.get("MCP_LAB_SERVER_COMMAND")
    if command:
        argv = shlex.split(command)
        return BasicMCPClient(argv[0], args=argv[1:], env=dict(os.environ))
    return BasicMCPClient(os.environ["MCP_LAB_URL"])


async def text(lab: BasicMCPClient) -> str:
    # annotated AnyUrl, but the mcp 2.x session under it takes only a str
    content = (await lab.read_resource(URI)).contents[0]
    return content.text if isinstance(content, mcp_types.TextResourceContents) else "(blob)"


async def main() -> None:
    lab = client()
    listed = [str(r.uri) for r in (await lab.list_resources()).resources]
    assert URI in listed, f"{URI} is not listed: {listed}"
    print("read:", await text(lab))
    print(
        f"{LIBRARY}: no subscribe API and no notification callback (a session per call);"
        f" re-read after {WAIT_SECONDS} s"
    )
    await asyncio.sleep(WAIT_SECONDS)  # nothing to wait on: the client surfaces no update
    print("re-read:", await text(lab))


asyncio.run(main())
