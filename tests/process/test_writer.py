"""The batch writer against a real Redis: batching, per-caller results, flush on close."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from redis.exceptions import ResponseError

from mcp_lab import state
from mcp_lab.process import writer as writer_module
from mcp_lab.process.embedded_redis import start_redis
from mcp_lab.process.writer import BatchWriter

pytestmark = pytest.mark.anyio


def xadd(key: str, value: int):
    def add(pipe) -> int:
        pipe.xadd(key, {"n": value})
        pipe.expire(key, 60)
        return 2

    return add


async def test_a_burst_shares_pipelines_and_each_caller_gets_its_own_reply(redis_url) -> None:
    redis = state.connect(redis_url, max_connections=2)
    writer = BatchWriter(redis, max_queue=100, max_batch=500)
    writer.start()
    try:
        replies = await asyncio.gather(*(writer.submit(xadd("burst", i)) for i in range(1000)))
        entries = await redis.xrange("burst")
        assert len(entries) == 1000
        # Each caller got the id of its own entry (and the EXPIRE's reply).
        by_value = {fields["n"]: entry_id for entry_id, fields in entries}
        assert [r[0] for r in replies] == [by_value[str(i)] for i in range(1000)]
        assert all(r[1] is True for r in replies)
        # Far fewer round trips than writes: the queue (100) bounds each batch.
        assert writer.batches <= 1000 // 50
        assert 1 < writer.largest_batch <= 100
    finally:
        await writer.close()
        await redis.aclose()


async def test_a_failing_command_fails_only_its_caller(redis_url) -> None:
    redis = state.connect(redis_url)
    await redis.set("not-a-stream", "x")
    writer = BatchWriter(redis)
    writer.start()
    try:
        good, bad = await asyncio.gather(
            writer.submit(xadd("fine", 1)),
            writer.submit(xadd("not-a-stream", 2)),
            return_exceptions=True,
        )
        assert isinstance(good, list) and isinstance(bad, ResponseError)
        assert await redis.xlen("fine") == 1
    finally:
        await writer.close()
        await redis.aclose()


async def test_close_writes_everything_queued_and_later_writes_go_direct(redis_url) -> None:
    redis = state.connect(redis_url)
    writer = BatchWriter(redis)
    writer.start()
    pending = [asyncio.create_task(writer.submit(xadd("queued", i))) for i in range(300)]
    await asyncio.sleep(0)  # one turn of the loop: every task has queued its write
    await writer.close()
    assert all(task.done() for task in pending)
    assert await redis.xlen("queued") == 300
    assert not writer.running
    await writer.submit(xadd("queued", 300))
    assert await redis.xlen("queued") == 301
    await redis.aclose()


async def test_an_urgent_write_does_not_wait_behind_the_queue(redis_url) -> None:
    """While the writer's batch is held up (a BLPOP that waits for a push) and a write
    queues behind it, an urgent write goes through at once in a pipeline of its own."""
    redis = state.connect(redis_url, max_connections=4)
    writer = BatchWriter(redis, max_queue=100, max_batch=500)
    writer.start()
    try:

        def held(pipe) -> int:
            pipe.blpop(["urgent-test:release"], timeout=5)
            return 1

        holding = asyncio.ensure_future(writer.submit(held))
        queued = asyncio.ensure_future(writer.submit(xadd("urgent-test:queued", 1)))
        await asyncio.sleep(0)  # both handed to the writer (no timing: one loop round)
        reply = await asyncio.wait_for(
            writer.submit(xadd("urgent-test:urgent", 2), urgent=True), timeout=4
        )
        assert reply[1] is True and writer.urgent_writes == 1
        assert not holding.done() and not queued.done()
        await redis.rpush("urgent-test:release", "go")
        await asyncio.wait_for(asyncio.gather(holding, queued), timeout=5)
        assert await redis.xlen("urgent-test:queued") == 1
    finally:
        await writer.close()
        await redis.aclose()


async def test_a_write_redis_does_not_answer_fails_saying_so(monkeypatch) -> None:
    """A frozen redis-server (SIGSTOP): queued and urgent writes each fail within the
    bound, with a reason in words (a bare TimeoutError made "unavailable: " and
    "event not kept ()")."""
    monkeypatch.setattr(writer_module, "BATCH_TIMEOUT_SECONDS", 0.5)
    frozen = start_redis()
    redis = state.connect(frozen.url, max_connections=2)
    writer = BatchWriter(redis, max_queue=100, max_batch=500)
    writer.start()
    try:
        await redis.ping()
        os.kill(frozen.process.pid, signal.SIGSTOP)
        for urgent in (False, True):
            with pytest.raises(TimeoutError, match=r"^Redis did not answer within 0\.5 s$"):
                async with asyncio.timeout(5):
                    await writer.submit(xadd("frozen", 1), urgent=urgent)
    finally:
        os.kill(frozen.process.pid, signal.SIGCONT)
        await writer.close()
        await redis.aclose()
        frozen.stop()
