"""The blocking test helpers refuse to run on an event loop, where they would stall
every task of the test (in-process servers, its own clients) while they wait."""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from mcp_lab.process.embedded_redis import free_port
from tests.support.lab import LabProcess, amcp_lab, lab_env, mcp_lab, start_server, start_updater

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def test_blocking_helpers_refuse_to_run_on_an_event_loop(redis_url: str) -> None:
    with pytest.raises(RuntimeError, match=r"mcp_lab blocks.* use await amcp_lab"):
        mcp_lab(lab_env(redis_url), "report")
    with pytest.raises(RuntimeError, match=r"start_server blocks.* use await lab\.aserver"):
        start_server(redis_url, free_port())
    with pytest.raises(RuntimeError, match=r"start_updater blocks.* use await lab\.aupdater"):
        start_updater(redis_url)
    hello = LabProcess("hello", [sys.executable, "-c", "print('hello')"], dict(os.environ))
    try:
        with pytest.raises(RuntimeError, match=r"wait_for blocks.* use await proc\.await_line"):
            hello.wait_for("hello")
        # The awaitable forms wait in a worker thread, where no loop runs.
        assert await hello.await_line("hello", timeout=10) == "hello"
        assert (await amcp_lab(lab_env(redis_url), "report")).returncode == 0
        assert await anyio.to_thread.run_sync(lambda: hello.wait_for("hello", 1)) == "hello"
    finally:
        hello.stop()


def test_blocking_helpers_run_where_no_loop_runs(redis_url: str) -> None:
    assert mcp_lab(lab_env(redis_url), "report").returncode == 0
