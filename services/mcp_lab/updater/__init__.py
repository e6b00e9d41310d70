"""The updater process: applies each update job after its delay.

Jobs come from the Redis stream ``mcp:jobs`` through the consumer group
``updaters``, so a job added while no updater runs waits in the stream. A job an
updater took but did not finish (it was stopped or killed) stays pending for that
updater's consumer name. Every updater refreshes a heartbeat key while it runs;
at start, and every few seconds after, it takes over the pending jobs of the
consumers whose heartbeat expired (never those of a live updater), and at start
also those left under its own name. A job taken over keeps its due time (entry
time + delay). Applying a job is one Redis script that acknowledges it, bumps the
versions and publishes; only the first acknowledgement applies, so no job is
applied twice, even if two updaters hold it. Jobs that fall due together are
applied together: one script per URI for a batch of them, whose updates go out
as messages naming many sessions each, so a burst of subscribes is notified on
time (docs/performance.md, "On time"); a batch takes one job of each session
in turn, so no session's many jobs hold another's back. In burst mode (``mcp-lab updater
--burst``) it applies every job there is, each when due, and returns once idle.

Jobs are read as bytes (the Redis client does not decode them) and checked here:
an entry over ``contract.MAX_MESSAGE_BYTES``, with a field that is not UTF-8, or
that :func:`contract.parse_job` refuses is acknowledged and deleted, then logged
in one short line, so no entry can stop the updater or be taken again forever.

The process itself (its loop, burst mode, entry point) is here; taking jobs over
is :mod:`mcp_lab.updater.takeover`, applying them :mod:`mcp_lab.updater.applying`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, state, state_jobs
from mcp_lab.catalog import Catalog
from mcp_lab.logs import setup_logging
from mcp_lab.process.reconnect import keep_running, stop_if_cancelled
from mcp_lab.scenarios import registry
from mcp_lab.settings import LabSettings
from mcp_lab.updater.applying import Applying, _Due
from mcp_lab.updater.takeover import TakeOver, _NewJobs

logger = logging.getLogger("mcp_lab.updater")

_BLOCK_MS = 2000


class Updater(TakeOver, Applying):
    """Reads jobs from the stream and applies each one when it is due."""

    def __init__(self, settings: LabSettings, redis: Redis, catalog: Catalog | None = None) -> None:
        self._settings = settings
        # The scenario's resources (``catalog`` when given: a test's own).
        self._catalog = registry.get(settings.scenario).catalog if catalog is None else catalog
        self._redis = redis
        # Jobs are read undecoded, so one entry that is not UTF-8 is a bad job,
        # not an error raised on every read of the stream.
        self._jobs_redis = state.connect(settings.redis_url, decode=False)
        self._consumer = settings.updater_consumer
        self._scheduled: dict[str, asyncio.Task[None]] = {}
        # Jobs that fell due and wait for the next batch, and the task applying them.
        self._due: list[_Due] = []
        self._applying: asyncio.Task[None] | None = None
        # The store's epoch the jobs are read under (state.store_epoch), noted at each
        # (re)connect: a job read before Redis came back empty is lost, not applied.
        self._epoch: str | None = None
        self._next_take_over = 0.0
        self._beater = f"{socket.gethostname()}:{os.getpid()}".encode()
        self._beaten = False
        self._twin_seen = False
        # One read of new jobs waits at most this long: the heartbeat is refreshed
        # and the take-over check made between reads.
        self._block_ms = max(
            1,
            min(
                _BLOCK_MS,
                int(settings.take_over_every_seconds * 1000),
                settings.updater_heartbeat_seconds * 1000 // 3,
            ),
        )
        self.applied = 0

    async def run(self, *, burst: bool = False) -> None:
        """Work until cancelled, reconnecting after any error (Redis or not). With
        ``burst``, work until idle instead (see :meth:`_burst`) and return; a Redis
        error then ends it, raised.

        Cancelling it also cancels the jobs it scheduled: they stay pending, as after
        a crash, until an updater takes them over."""
        try:
            await (self._burst() if burst else self._run())
        finally:
            scheduled = list(self._scheduled.values())
            if self._applying is not None:
                scheduled.append(self._applying)
            for task in scheduled:
                task.cancel()
            await asyncio.gather(*scheduled, return_exceptions=True)

    async def _run(self) -> None:
        await keep_running(
            self._work,
            logger=logger,
            tag="updater",
            max_pause_seconds=self._settings.reconnect_backoff_max_seconds,
        )

    async def _work(self, connected: Callable[[], None]) -> None:
        await state_jobs.ensure_job_group(self._redis)
        await self._redis.set(contract.STATE_SCOPE_KEY, self._settings.state_scope)
        self._epoch = await state.store_epoch(self._redis)
        # The heartbeat comes first: from now on no other updater takes this
        # one's jobs, not even those it is about to take over.
        await self._beat()
        await self._take_over_own_leftovers()
        await self._take_over_stranded()
        logger.info(
            "[updater] ready stream=%s group=%s consumer=%s delay=%ss",
            contract.JOBS_STREAM,
            contract.JOBS_GROUP,
            self._consumer,
            self._settings.update_delay_seconds,
        )
        connected()
        await self._read_new_jobs()

    async def _burst(self) -> None:
        """Take every job there is (this name's leftovers, those of updaters without
        heartbeat, every new one), wait until each is applied when due, then look
        again; return once a look finds nothing and nothing is scheduled."""
        await state_jobs.ensure_job_group(self._redis)
        await self._redis.set(contract.STATE_SCOPE_KEY, self._settings.state_scope)
        self._epoch = await state.store_epoch(self._redis)
        await self._beat()
        await self._take_over_own_leftovers()
        await self._take_over_stranded()
        logger.info("[updater] burst: applying the jobs in stream=%s", contract.JOBS_STREAM)
        while True:
            await self._beat()
            reply = cast(
                _NewJobs,
                await self._jobs_redis.xreadgroup(
                    contract.JOBS_GROUP, self._consumer, {contract.JOBS_STREAM: ">"}, count=100
                ),
            )
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    self._schedule(entry_id.decode(), fields, recovered=False)
            if not self._scheduled:
                break
            while self._scheduled:  # the heartbeat is kept while jobs wait out their delay
                await asyncio.wait(list(self._scheduled.values()), timeout=self._block_ms / 1000)
                await self._beat()
        logger.info("[updater] burst done: %d job(s) applied", self.applied)

    async def close(self) -> None:
        """Release the updater's own Redis connection (the one that reads jobs)."""
        await self._jobs_redis.aclose()

    async def _read_new_jobs(self) -> None:
        while True:
            stop_if_cancelled()
            await self._beat()
            if time.monotonic() >= self._next_take_over:
                await self._take_over_stranded()
            reply = cast(
                _NewJobs,
                await self._jobs_redis.xreadgroup(
                    contract.JOBS_GROUP,
                    self._consumer,
                    {contract.JOBS_STREAM: ">"},
                    count=100,
                    block=self._block_ms,
                ),
            )
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    self._schedule(entry_id.decode(), fields, recovered=False)


async def run_updater(settings: LabSettings, *, burst: bool = False) -> None:
    """Run one updater until cancelled (with ``burst``: until idle)."""
    redis = state.connect(settings.redis_url)
    updater = Updater(settings, redis)
    try:
        await updater.run(burst=burst)
    finally:
        await updater.close()
        await redis.aclose()


def main(settings: LabSettings, *, burst: bool = False) -> int:
    """Entry point of ``mcp-lab updater [--burst]``; the exit code."""
    setup_logging(settings.log_level)
    try:
        asyncio.run(run_updater(settings, burst=burst))
    except KeyboardInterrupt:
        pass
    except (RedisError, OSError) as exc:  # only a burst ends on an error
        logger.error("[updater] burst stopped: redis unavailable (%s)", exc)
        return 1
    return 0
