"""One writer task that batches small Redis writes into pipelines.

Every request the server handles writes to Redis at least twice (its evidence
record, and its SSE event for resumption). Done one command per caller, a burst
of a few thousand requests needs as many connections at once; done here, the
burst queues up (a bounded queue: when it is full, callers wait) and each
round trip carries every write that queued meanwhile, on one connection. A
subscribe's Redis work goes here too, its read included (``Lab.subscribe``):
the pool's bounded wait for a connection refused the tail of a 10,000-subscribe
burst, where the queue here makes it wait its turn.

A caller still learns the outcome of its own write: :meth:`BatchWriter.submit`
returns that write's replies once its pipeline ran, or raises its error. Before
:meth:`start` and after :meth:`close` (no event loop task to hand the write to),
a write goes straight to Redis in a pipeline of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

logger = logging.getLogger("mcp_lab")

# Adds one caller's commands to a pipeline; returns how many it added.
Commands = Callable[[Pipeline], int]

DEFAULT_QUEUE = 10_000
DEFAULT_BATCH = 500
# Longest one pipeline may take (a hung Redis); its writes then fail. Queueing
# time is not counted: in a burst a write waits its turn, it does not fail.
BATCH_TIMEOUT_SECONDS = 10.0
_CLOSE_SECONDS = 10.0


def no_answer() -> TimeoutError:
    """The error of a write Redis did not answer in time: with its reason in words (a
    bare TimeoutError has none, and a client's error or a log line said nothing)."""
    return TimeoutError(f"Redis did not answer within {BATCH_TIMEOUT_SECONDS:g} s")


class BatchWriter:
    """Queues writes and runs them in pipelines (not transactions), a batch at a time."""

    def __init__(
        self, redis: Redis, *, max_queue: int = DEFAULT_QUEUE, max_batch: int = DEFAULT_BATCH
    ) -> None:
        self._redis = redis
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._queue: asyncio.Queue[tuple[Commands, asyncio.Future[list[Any]]] | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.batches = 0
        self.largest_batch = 0
        self.urgent_writes = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the writer task in the running event loop."""
        if self.running:
            return
        self._queue = asyncio.Queue(self._max_queue)
        self._closing = False
        self._task = asyncio.create_task(self._run(), name="redis-writer")

    async def submit(self, commands: Commands, *, urgent: bool = False) -> list[Any]:
        """Run ``commands`` in the next pipeline; their replies, or the error that
        stopped them (a RedisError or OSError). Waits while the queue is full.

        ``urgent``: a write that something time-bound waits for (a notification due
        now must have its resume event kept before it is sent) does not queue behind
        a burst's writes: it goes at once in a pipeline of its own, bounded as a batch
        is. Its order against queued writes is not kept, so only writes that no
        queued write must precede may be urgent."""
        queue = self._queue
        if urgent:
            self.urgent_writes += 1
            try:
                async with asyncio.timeout(BATCH_TIMEOUT_SECONDS):
                    return await self._execute_alone(commands)
            except TimeoutError:
                raise no_answer() from None
        if self._closing or not self.running or queue is None:
            return await self._execute_alone(commands)
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        await queue.put((commands, done))
        return await done

    async def close(self) -> None:
        """Write everything queued so far, then stop (bounded; later writes go direct)."""
        task, queue = self._task, self._queue
        if task is None or queue is None or task.done():
            return
        self._closing = True  # writes from now on go direct
        await queue.put(None)  # after every write already queued
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=_CLOSE_SECONDS)
        except TimeoutError:
            logger.warning("[writer] queued writes not flushed within %.0fs", _CLOSE_SECONDS)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            self._task = None
            self._fail_queued(queue, RedisError("writer stopped"))

    async def _execute_alone(self, commands: Commands) -> list[Any]:
        pipe = self._redis.pipeline(transaction=False)
        commands(pipe)
        replies: list[Any] = await pipe.execute()
        return replies

    async def _run(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            item = await queue.get()
            batch = []
            stop = item is None
            if item is not None:
                batch.append(item)
            while not stop and len(batch) < self._max_batch and not queue.empty():
                item = queue.get_nowait()
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            if batch:
                await self._write(batch)
            if stop:
                return

    async def _write(self, batch: list[tuple[Commands, asyncio.Future[list[Any]]]]) -> None:
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        pipe = self._redis.pipeline(transaction=False)
        counts = []
        for commands, _ in batch:
            counts.append(commands(pipe))
        try:
            async with asyncio.timeout(BATCH_TIMEOUT_SECONDS):
                replies = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError, TimeoutError) as exc:
            failed = no_answer() if type(exc) is TimeoutError and not exc.args else exc
            for _, done in batch:
                if not done.done():
                    done.set_exception(failed)
            return
        except BaseException as exc:  # cancelled: nobody may wait forever
            for _, done in batch:
                if not done.done():
                    done.set_exception(RedisError(f"writer stopped: {type(exc).__name__}"))
            raise
        at = 0
        for (_, done), count in zip(batch, counts, strict=True):
            mine = replies[at : at + count]
            at += count
            if done.done():  # the caller gave up (cancelled or timed out)
                continue
            error = next((r for r in mine if isinstance(r, Exception)), None)
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(mine)

    @staticmethod
    def _fail_queued(
        queue: asyncio.Queue[tuple[Commands, asyncio.Future[list[Any]]] | None],
        error: Exception,
    ) -> None:
        while not queue.empty():
            item = queue.get_nowait()
            if item is not None and not item[1].done():
                item[1].set_exception(error)
