"""The reconnect-and-backoff loop shared by relay and updater."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from mcp_lab.process.reconnect import keep_running

pytestmark = pytest.mark.anyio


async def test_pauses_double_up_to_the_cap_and_start_over_once_connected(caplog) -> None:
    calls = 0
    errors = 0
    third_connected = anyio.Event()
    fifth_started = anyio.Event()

    async def work(connected) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            connected()
            third_connected.set()
            raise RuntimeError("a bug after connecting")
        if calls == 5:
            fifth_started.set()
            await asyncio.Event().wait()  # works until cancelled
        raise RedisConnectionError("gone")

    def on_error() -> None:
        nonlocal errors
        errors += 1

    logger = logging.getLogger("mcp_lab.test")
    caplog.set_level(logging.INFO, logger="mcp_lab")
    task = asyncio.create_task(
        keep_running(work, logger=logger, tag="t", max_pause_seconds=0.3, on_error=on_error)
    )
    with anyio.fail_after(10):
        await third_connected.wait()
        await fifth_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    lines = [r.getMessage() for r in caplog.records if r.name == "mcp_lab.test"]
    assert lines == [
        "[t] redis unavailable (gone); retrying in 0.2s",
        "[t] redis unavailable (gone); retrying in 0.3s",
        "[t] unexpected error; restarting in 0.2s",
        "[t] redis unavailable (gone); retrying in 0.3s",
    ]
    assert errors == 4
