"""LangChain's MCP adapters reaching level 6: a connection's documented
``session_kwargs`` (keyword arguments for the MCP SDK's ``ClientSession``) carry a
``message_handler``, and ``client.session("lab")`` yields that ``ClientSession``
(langchain-mcp-adapters 0.3.2 installs ``mcp`` 1.x, which speaks 2025-11-25), on which
``subscribe_resource`` sends ``resources/subscribe``. The update then reaches the
``message_handler``, and the program reads again through ``load_mcp_resources``. The
lab runs it with ``mcp-lab check --client-file
docs/examples/workarounds/langchain-mcp-adapters-subscribe.toml``."""

import asyncio
import os

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.resources import load_mcp_resources
from mcp.types import ResourceUpdatedNotification, ServerNotification
from pydantic import AnyUrl

URI = "test://review/status"


async def main() -> None:
    updated = asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ServerNotification) and isinstance(
            message.root, ResourceUpdatedNotification
        ):
            updated.set()

    lab = {
        "transport": "streamable_http",
        "url": os.environ["MCP_LAB_URL"],
        "session_kwargs": {"message_handler": on_message},
    }
    client = MultiServerMCPClient({"lab": lab})  # type: ignore[dict-item]
    async with client.session("lab") as session:
        print("read:", (await load_mcp_resources(session, uris=URI))[0].as_string())
        await session.subscribe_resource(AnyUrl(URI))
        await asyncio.wait_for(updated.wait(), 15)
        print("message_handler: resource updated")
        print("re-read:", (await load_mcp_resources(session, uris=URI))[0].as_string())


asyncio.run(main())
