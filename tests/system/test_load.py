"""Load: a storm of sessions subscribing at once loses nothing.

A real server and updater, a real Redis, the raw Streamable HTTP client of
scripts/rawmcp.py (one POST connection and one GET stream per session). Every
session initializes and opens its GET stream, then all subscribe at the same
moment; each must be accepted, notified, and fully present in the evidence
record (its initialize, its subscribe, its notification in ``mcp:events``), and
after every session has ended no subscriber may be left in Redis.

Before the shared Redis pool waited for a free connection and evidence and
resume writes were batched, a few hundred sessions were enough for refusals
("Lab state store (Redis) unavailable: Too many connections") and lost records
(at 500: 400 refused). Before session-end clean-ups ran apart from the SDK's
5-second session-end callback, 5,000 sessions ending at once left ~900
subscribers behind. Before a subscribe's Redis work went through the batch
writer, each of its four commands waited for a pool connection at most
``MCP_TEST_REDIS_POOL_TIMEOUT_SECONDS``, and a burst outgrowing that wait was
refused ("No connection available."): the burst test reproduces that with a
small pool.

The issue asks for 5,000 sessions: that passes (``MCP_LAB_LOAD_SESSIONS=5000``,
about 95 s for the storm on 2 cores). The default is 1,500 (and the burst of
500): the file took 48 s at load ~3.5, so it stays under a minute.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from urllib.parse import urlsplit

import anyio
import pytest

from mcp_lab.process.embedded_redis import free_port, start_redis
from tests.support.lab import ROOT, LabProcess, lab_env, mcp_lab

sys.path.insert(0, str(ROOT / "scripts"))

from bench.procs import SESSION_ENDED
from bench.storm import storm
from rawmcp import RawClient

SESSIONS = int(os.environ.get("MCP_LAB_LOAD_SESSIONS", "1500"))
# Redis trouble the server logs when it refuses or drops something.
TROUBLE = r"Too many connections|No connection available|event not recorded|event not kept"


@pytest.mark.timeout(60 + SESSIONS // 20)
def test_storm_of_subscribes_refuses_and_loses_nothing(lab, redis_url):
    _storm_loses_nothing(lab, redis_url, SESSIONS)


# Sessions of the burst below, and the pool it meets: 4 connections, each waited
# for at most 0.5 s.
BURST = 500
TIGHT_POOL = {"redis_max_connections": "4", "redis_pool_timeout_seconds": "0.5"}


@pytest.mark.timeout(90)
def test_a_burst_waits_for_the_batch_writer_not_for_a_pool_connection(lab, redis_url):
    """A subscribe's Redis work queues in the batch writer, so the Redis pool's
    bounded wait cannot refuse a burst, however large against the pool.

    Before, each subscribe took a pool connection four times (read, two set adds, the
    job): a burst of ~10,000 against the default pool (100 connections, 20 s wait)
    got 3,161 refusals ("No connection available."); here 500 against a pool of 4
    with a 0.5 s wait got 231."""
    _storm_loses_nothing(lab, redis_url, BURST, **TIGHT_POOL)


def _storm_loses_nothing(lab, redis_url, sessions: int, **settings: str) -> None:
    server, url = lab.server(update_delay_seconds="0", **settings)
    lab.updater(update_delay_seconds="0")
    port = urlsplit(url).port
    assert port is not None

    result = asyncio.run(
        storm(
            port,
            sessions,
            redis_url=redis_url,
            concurrency=200,
            timeout=60,
            ended=lambda: len(server.matching(SESSION_ENDED)),
        )
    )
    print(result.summary())

    assert not result.setup_failed, result.summary()
    assert not result.refused, result.summary()
    assert result.missing_notifications == 0, result.summary()
    assert result.evidence_missing == 0, result.summary()
    assert result.end_failed == 0, result.summary()
    assert result.subscribers_left == 0, result.summary()
    assert server.matching(TROUBLE) == []


async def healthz_until_lost(port: int, lost: int, bound: float = 15.0) -> None:
    """Poll the server's /healthz (each answer bounded) until it counts ``lost`` events."""
    from mcp_lab.cli.healthcheck import http_get

    seen = None
    with anyio.fail_after(bound):
        while seen != lost:
            _, body = await anyio.to_thread.run_sync(http_get, f"http://127.0.0.1:{port}/healthz")
            seen = json.loads(body)["events_lost"]
            if seen != lost:
                await anyio.sleep(0.1)


def test_events_lost_while_redis_is_down_are_counted_in_the_report(tmp_path):
    """An event that truly cannot be written is counted, and the report says so."""
    redis = start_redis(persistent=True)
    env = lab_env(redis.url, port=str(free_port()), update_delay_seconds="600")
    server = LabProcess("server", [sys.executable, "-m", "mcp_lab", "server"], env)
    port = int(env["MCP_TEST_PORT"])
    lost_while_down = 5
    try:
        server.wait_for(r"\[lab\] server ready", timeout=30)
        client = RawClient("127.0.0.1", port, name="outage")

        async def before_during_after() -> None:
            await client.initialize()
            assert "result" in await client.request("resources/list")
            redis.halt()
            mark = server.mark()
            for _ in range(lost_while_down):  # no Redis needed to answer these
                assert "result" in await client.request("resources/list")
            # The first lost event is logged; the rest are counted (/healthz shows it).
            await server.await_line(r"event not recorded .*; 1 lost", since=mark)
            await healthz_until_lost(port, lost_while_down)
            redis.restart()
            assert "result" in await client.request("resources/list")
            await server.await_line(rf"\[evidence\] {lost_while_down} event\(s\) between")
            await client.end()

        asyncio.run(before_during_after())
        shown = mcp_lab(env, "report", "--format", "json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["missing_events"] == lost_while_down
        table = mcp_lab(env, "report").stdout
        assert f"note: {lost_while_down} event(s) of this run could not be recorded" in table
        # A new run starts after the outage: nothing is missing from it.
        assert mcp_lab(env, "reset").returncode == 0
        shown = mcp_lab(env, "report", "--format", "json")
        assert json.loads(shown.stdout)["missing_events"] == 0
    finally:
        server.stop()
        redis.stop()
