"""Servers embedded in the clients and bridges runners (services/mcp_lab/runners/embedded.py)."""

from __future__ import annotations

import signal

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from mcp_lab.runners import embedded

pytestmark = pytest.mark.anyio


def _app() -> Starlette:
    return Starlette(routes=[Route("/", lambda _: PlainTextResponse("ok"))])


async def test_servers_whose_lives_overlap_leave_the_signal_handlers_alone() -> None:
    """The first started stops first, the second after it: with uvicorn's own signal
    capture the second put back the first's handler, a stopped server's, which
    sse-starlette then read as "shutting down" for every SSE response of the process."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    first = embedded.serve(_app())
    first_url = await first.__aenter__()
    async with embedded.serve(_app()) as second_url, httpx2.AsyncClient() as client:
        assert (await client.get(first_url)).text == "ok"
        assert (await client.get(second_url)).text == "ok"
        await first.__aexit__(None, None, None)
    assert {sig: signal.getsignal(sig) for sig in before} == before
