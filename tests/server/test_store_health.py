"""The server's probe of its store (mcp_lab.server.store_health) against a redis-server
of the test's own, frozen with SIGSTOP or filled to its maxmemory; and the update
script refusing a job, unacknowledged, while Redis is full (mcp_lab.state_jobs)."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest
import redis.asyncio
from redis.exceptions import OutOfMemoryError

from mcp_lab import contract, state, state_jobs
from mcp_lab.catalog import VERSION_PLACEHOLDER
from mcp_lab.process.embedded_redis import EmbeddedRedis, RedisNotFound, start_redis
from mcp_lab.server.store_health import FULL, OK, UNREACHABLE, GuardedWriter, StoreHealth

pytestmark = pytest.mark.anyio

ANSWER = 0.5
EVERY = 0.1
# Found within the answer time plus a probe interval; room for a loaded machine.
WITHIN = ANSWER + EVERY + 1.5


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own (it is frozen and filled)."""
    try:
        server = start_redis()
    except RedisNotFound as exc:
        pytest.skip(f"no redis-server: {exc}")
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


@contextmanager
def frozen(server: EmbeddedRedis) -> Iterator[None]:
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)


@asynccontextmanager
async def probing(url: str) -> AsyncIterator[StoreHealth]:
    health = StoreHealth(url, "r-test", answer_seconds=ANSWER, every_seconds=EVERY)
    async with anyio.create_task_group() as group:
        group.start_soon(health.run)
        try:
            yield health
        finally:
            group.cancel_scope.cancel()


async def until(health: StoreHealth, wanted: str) -> float:
    """Seconds until the probe finds the store ``wanted`` (bounded)."""
    start = time.monotonic()
    with anyio.fail_after(WITHIN + 5):
        while health.state != wanted:
            await anyio.sleep(0.02)
    return time.monotonic() - start


async def test_a_frozen_store_releases_waiting_work_and_refuses_new_work(
    own_redis: EmbeddedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_lab.server")
    client = state.connect(own_redis.url)  # its own timeout is 10 s
    try:
        async with probing(own_redis.url) as health:
            await until(health, OK)
            with frozen(own_redis):
                start = time.monotonic()
                with pytest.raises(state.StoreUnavailable, match=r"did not answer within 0\.5 s"):
                    async with health.bounded():
                        await client.get("k")
                assert time.monotonic() - start < WITHIN
                start = time.monotonic()
                with pytest.raises(state.StoreUnavailable):
                    async with health.bounded():
                        await client.get("k")
                assert time.monotonic() - start < 0.6  # refused after a short grace, not 2 s
                assert health.state == UNREACHABLE and health.down_for() > 0
            took = await until(health, OK)
            assert took < WITHIN
            async with health.bounded():
                await client.set("k", "v")
    finally:
        await client.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "mcp_lab.server"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("[lab] redis not answering (did not answer within 0.5 s)")
    assert lines[1].startswith("[lab] redis answers again after"), lines
    assert health.outages == 1 and health.outage_seconds > 0


async def test_a_full_store_is_found_full_and_then_fine(own_redis: EmbeddedRedis) -> None:
    admin = state.connect(own_redis.url)
    try:
        await admin.set(contract.replica_heartbeat_key("r-test"), "1", ex=30)
        async with probing(own_redis.url) as health:
            await until(health, OK)
            await admin.config_set("maxmemory-policy", "noeviction")
            await admin.config_set("maxmemory", 1)
            assert await until(health, FULL) < WITHIN
            assert "maxmemory" in health.reason
            async with health.bounded():  # reads still work: nothing is refused here
                assert await admin.get("missing") is None
            await admin.config_set("maxmemory", 0)
            assert await until(health, OK) < WITHIN
        # The probe never created nor extended anything.
        assert await admin.ttl(contract.replica_heartbeat_key("r-test")) <= 30
        assert await admin.exists(contract.replica_heartbeat_key("r-other")) == 0
    finally:
        await admin.aclose()


async def test_a_write_given_up_while_frozen_is_never_written(own_redis: EmbeddedRedis) -> None:
    """The first write is in the pipeline Redis holds; the second waits in the queue.
    Both callers get the error once the probe finds Redis frozen; the queued one adds
    nothing when the writer gets to it (a refused subscribe leaves no job behind)."""
    client = state.connect(own_redis.url)
    async with probing(own_redis.url) as health:
        writer = GuardedWriter(client, health)
        writer.start()
        outcomes: dict[str, Any] = {}

        async def write(key: str) -> None:
            try:
                outcomes[key] = await writer.submit(lambda pipe: bool(pipe.set(key, "1")))
            except state.StoreUnavailable as exc:
                outcomes[key] = exc

        try:
            await until(health, OK)
            with frozen(own_redis):
                async with anyio.create_task_group() as group:
                    group.start_soon(write, "in-flight")
                    await anyio.sleep(0.1)
                    group.start_soon(write, "queued")
                assert all(isinstance(v, state.StoreUnavailable) for v in outcomes.values())
            await until(health, OK)
            await writer.submit(lambda pipe: bool(pipe.set("after", "1")))  # after both
            assert await client.get("after") == "1"
            assert await client.exists("queued") == 0
        finally:
            await writer.close()
            await client.aclose()


async def test_the_update_script_refuses_a_job_unacknowledged_while_full(
    own_redis: EmbeddedRedis,
) -> None:
    client: redis.asyncio.Redis = state.connect(own_redis.url)
    uri = "test://review/status"
    try:
        await state_jobs.ensure_job_group(client)
        entry = await client.xadd(contract.JOBS_STREAM, {"uri": uri, "target": "s1"})
        await client.xreadgroup(contract.JOBS_GROUP, "c1", {contract.JOBS_STREAM: ">"})
        await client.config_set("maxmemory-policy", "noeviction")
        await client.config_set("maxmemory", 1)
        job = state_jobs.DueJob(str(entry), ["s1"], 0, False)
        template = f"version: {VERSION_PLACEHOLDER}"
        apply: dict[str, Any] = {"template": template, "channel": "c", "ttl_seconds": 0}
        with pytest.raises(OutOfMemoryError):
            await state_jobs.apply_jobs(client, uri, [job], **apply)
        pending = await client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
        assert pending["pending"] == 1  # not acknowledged: it waits
        assert await client.exists(contract.state_key("s1", uri)) == 0
        await client.config_set("maxmemory", 0)
        assert await state_jobs.apply_jobs(client, uri, [job], **apply) == [[2]]
        pending = await client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
        assert pending["pending"] == 0
    finally:
        await client.aclose()
