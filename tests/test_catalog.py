"""Resources are data: a second resource, declared in this test alone, goes the whole way.

The server (its ASGI app under uvicorn in this event loop, on a loopback port)
and the updater (a task in the same loop) are built with a catalog that holds
the lab's resource and one more; nothing under ``services/mcp_lab/`` names the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import uvicorn

from mcp_lab import state
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS, Catalog, ResourceSpec
from mcp_lab.process.embedded_redis import free_port
from mcp_lab.server.app import http_app
from mcp_lab.settings import LabSettings
from mcp_lab.updater import Updater
from tests.support.lab import connect

pytestmark = pytest.mark.anyio

BUILD = ResourceSpec(
    uri="test://ci/build",
    name="ci-build",
    description="A second resource, known only to this test.",
    mime_type="text/markdown",
    initial_text="# build\nstate: {status}\nrevision: {version}",
    updated_text="# build\nstate: {status}\nrevision: {version}\nartifacts: ready",
)
CATALOG = Catalog([REVIEW_STATUS, BUILD])


def test_a_catalog_rejects_specs_that_cannot_be_updated_or_repeat() -> None:
    with pytest.raises(ValueError, match="no \\{version\\}"):
        ResourceSpec("test://x/y", "y", "", "text/plain", "v1", "no placeholder")
    with pytest.raises(ValueError, match="twice"):
        Catalog([BUILD, BUILD])
    assert BUILD.initial("queued") == "# build\nstate: queued\nrevision: 1"


@asynccontextmanager
async def lab_in_process(redis_url: str, catalog: Catalog) -> AsyncIterator[str]:
    """The lab's server and updater serving ``catalog``, in this loop; yields the MCP URL."""
    port = free_port()
    settings = LabSettings(
        redis_url=redis_url,
        port=port,
        update_delay_seconds=0,
        initial_status="queued",
        updated_status="green",
    )
    app, _ = http_app(settings, catalog)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    redis = state.connect(redis_url)
    updater = Updater(settings, redis, catalog)
    updating = asyncio.create_task(updater.run())
    try:
        with anyio.fail_after(15):
            while not server.started:
                if serving.done():
                    serving.result()
                await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}{settings.path}"
    finally:
        server.should_exit = True
        updating.cancel()
        await asyncio.gather(updating, return_exceptions=True)
        await updater.close()
        await redis.aclose()
        with anyio.fail_after(15):
            await serving


async def test_a_resource_added_in_a_test_is_listed_read_subscribed_and_updated(
    redis_url,
) -> None:
    async with lab_in_process(redis_url, CATALOG) as url, connect(url, "catalog") as client:
        listed = await client.session.list_resources()
        shown = {str(r.uri): (r.name, r.mime_type) for r in listed.resources}
        assert shown == {
            REVIEW_STATUS.uri: (REVIEW_STATUS.name, REVIEW_STATUS.mime_type),
            BUILD.uri: (BUILD.name, BUILD.mime_type),
        }
        assert await client.read_text(BUILD.uri) == "# build\nstate: queued\nrevision: 1"

        await client.session.subscribe_resource(BUILD.uri)
        assert await client.wait_updated(1) == [BUILD.uri]
        assert await client.read_text(BUILD.uri) == (
            "# build\nstate: green\nrevision: 2\nartifacts: ready"
        )
        # The other resource kept its own text and version.
        assert (await client.read_text(REVIEW_STATUS.uri)).startswith("status: queued\nversion: 1")


async def test_the_lab_catalog_does_not_serve_the_test_resource(redis_url) -> None:
    assert BUILD.uri not in LAB_CATALOG
    async with lab_in_process(redis_url, LAB_CATALOG) as url, connect(url, "catalog") as client:
        listed = await client.session.list_resources()
        assert [str(r.uri) for r in listed.resources] == [REVIEW_STATUS.uri]
