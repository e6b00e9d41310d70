"""Installing a client once per version into the clients' cache (npm, through
:mod:`services.runners.install`), with Node 22 beside it where the client needs it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from services.runners.clients.pins import ClientSpec
from services.runners.install import NODE22_VERSION, node22_package, npm_install


def cache_dir() -> Path:
    base = os.environ.get("MCP_LAB_CLIENTS_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "mcp-lab" / "clients"


async def install(spec: ClientSpec, version: str) -> tuple[Path, list[Path]]:
    """The client's binary, and the directories its run puts first on PATH."""
    assert spec.package is not None
    binary = await asyncio.to_thread(
        npm_install,
        spec.name,
        spec.package,
        version,
        spec.binary,
        spec.local_postinstall,
        cache=cache_dir(),
    )
    paths = [binary.parent]
    if spec.needs_node22:
        node = await asyncio.to_thread(
            npm_install, "node", node22_package(), NODE22_VERSION, "node", cache=cache_dir()
        )
        paths.insert(0, node.parent)
    return binary, paths
