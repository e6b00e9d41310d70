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
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, logs, state
from mcp_lab.catalog import Catalog
from mcp_lab.logs import setup_logging
from mcp_lab.process.reconnect import keep_running, stop_if_cancelled
from mcp_lab.scenarios import registry
from mcp_lab.settings import LabSettings

if TYPE_CHECKING:
    from redis.typing import StreamIdT

logger = logging.getLogger("mcp_lab.updater")

_RawFields = dict[bytes, bytes]

# The replies of the job client (``decode=False``, RESP2) as they really are;
# redis-py types them loosely (bytes or str or int, or RESP3's shapes), so each
# is cast once where it enters, to one of these.


class _Pending(TypedDict):
    """One entry of an XPENDING range."""

    message_id: bytes
    consumer: bytes
    time_since_delivered: int
    times_delivered: int


# XCLAIM: an entry deleted from the stream while pending comes back as None parts.
_Claimed = list[tuple[bytes | None, _RawFields | None]]
# XREADGROUP: a [stream, entries] pair per stream; empty when the block timed out.
_NewJobs = list[tuple[bytes, list[tuple[bytes, _RawFields]]]]

_BLOCK_MS = 2000
_RETRY_SECONDS = 1.0
# How many jobs stranded by a dead updater one look takes over at most (the rest
# wait for the next look, every ``take_over_every_seconds``).
_TAKE_OVER_BATCH = 100
# How many due jobs one batch applies at most (one script per URI: Redis runs
# nothing else meanwhile, so a batch stays short).
_APPLY_BATCH = 500
# A batch applied this long after its earliest job was due is logged as late.
_LATE_SECONDS = 1.0


@dataclass(slots=True)
class _Due:
    """A job that fell due, waiting in the next batch."""

    entry_id: str
    job: contract.UpdateJob
    due: float  # seconds since the epoch
    done: asyncio.Future[None]


def decode_job_fields(raw: dict[bytes, bytes]) -> dict[str, str]:
    """The fields of a job entry as text; raises :class:`contract.BadMessage` for an
    entry over ``contract.MAX_MESSAGE_BYTES`` or a field that is not UTF-8."""
    size = sum(len(key) + len(value) for key, value in raw.items())
    if size > contract.MAX_MESSAGE_BYTES:
        raise contract.BadMessage(f"entry of {size} bytes is over {contract.MAX_MESSAGE_BYTES}")
    fields: dict[str, str] = {}
    for key, value in raw.items():
        try:
            name = key.decode()
        except UnicodeDecodeError as exc:
            raise contract.BadMessage(f"field name {logs.shown(key)} is not UTF-8") from exc
        try:
            fields[name] = value.decode()
        except UnicodeDecodeError as exc:
            raise contract.BadMessage(f"field {logs.shown(key)} is not UTF-8") from exc
    return fields


def fair_batch(due: list[_Due], most: int) -> tuple[list[_Due], list[_Due]]:
    """The next batch of ``due`` jobs (at most ``most``) and the rest, both in their
    order: the first job of each target, then the second of each, and so on. A
    session with thousands of jobs due does not hold another's one job back."""
    if len(due) <= most:
        return due, []
    seen: dict[str, int] = {}
    ranks = []
    for item in due:
        rank = seen.get(item.job.target, 0)
        seen[item.job.target] = rank + 1
        ranks.append(rank)
    chosen = set(sorted(range(len(due)), key=lambda at: (ranks[at], at))[:most])
    batch = [item for at, item in enumerate(due) if at in chosen]
    rest = [item for at, item in enumerate(due) if at not in chosen]
    return batch, rest


class Updater:
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
        await state.ensure_job_group(self._redis)
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
        await state.ensure_job_group(self._redis)
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

    async def _beat(self) -> None:
        """Say this updater works; other updaters leave its pending jobs alone.

        The heartbeat holds this process's name: finding another one there after
        the first beat means a second updater runs under the same consumer name.
        """
        previous = cast(
            bytes | None,  # the previous value: bytes, whatever anyone wrote there
            await self._jobs_redis.set(
                contract.updater_heartbeat_key(self._consumer),
                self._beater,
                ex=self._settings.updater_heartbeat_seconds,
                get=True,
            ),
        )
        if self._beaten and previous not in (None, self._beater) and not self._twin_seen:
            self._twin_seen = True
            logger.warning(
                "[updater] another updater (%s) also runs as consumer=%s: give each its own "
                "MCP_TEST_UPDATER_CONSUMER, or the jobs of one that dies wait for a restart",
                logs.shown(previous),
                self._consumer,
            )
        self._beaten = True

    async def _take_over_own_leftovers(self) -> None:
        """Schedule the jobs pending for this consumer name that are not scheduled here:
        an earlier updater of this name took them and stopped before applying them."""
        after = "-"
        while True:
            seen, after = await self._claim(
                self._consumer.encode(), "left pending by an earlier updater of this name", after
            )
            if seen < _TAKE_OVER_BATCH:
                return

    async def _take_over_stranded(self) -> None:
        """Take over the pending jobs of every consumer without a heartbeat (an updater
        that died or stopped), up to ``_TAKE_OVER_BATCH`` jobs; the rest come next time.
        Jobs of live updaters, this one's included, stay where they are."""
        self._next_take_over = time.monotonic() + self._settings.take_over_every_seconds
        summary = await self._jobs_redis.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
        holders: list[bytes] = [
            c["name"] for c in summary["consumers"] if c["name"] != self._consumer.encode()
        ]
        budget = _TAKE_OVER_BATCH
        dead = 0
        for holder in holders:
            if budget > 0 and not await self._is_alive(holder):
                dead += 1
                seen, _ = await self._claim(holder, "no heartbeat: it stopped or died", "-", budget)
                budget -= seen
        logger.debug(
            "[updater] take-over check: %d other consumer(s) with pending jobs, %d without "
            "heartbeat",
            len(holders),
            dead,
        )

    async def _is_alive(self, consumer: bytes) -> bool:
        try:
            name = consumer.decode()
        except UnicodeDecodeError:
            return False  # not an updater's name: none could have set its heartbeat
        return bool(await self._redis.exists(contract.updater_heartbeat_key(name)))

    async def _claim(
        self, consumer: bytes, why: str, after: str = "-", limit: int = _TAKE_OVER_BATCH
    ) -> tuple[int, str]:
        """Move up to ``limit`` pending jobs of ``consumer`` (ids past ``after``) to this
        updater and schedule them, due when they always were (entry time + delay).
        Returns how many were pending, and where the next page starts."""
        pending = cast(
            list[_Pending],
            await self._jobs_redis.xpending_range(
                contract.JOBS_STREAM,
                contract.JOBS_GROUP,
                min=after,
                max="+",
                count=limit,
                consumername=consumer,
            ),
        )
        if not pending:
            return 0, after
        ids: list[StreamIdT] = [
            p["message_id"] for p in pending if p["message_id"].decode() not in self._scheduled
        ]
        # A job another updater claimed since XPENDING has been idle for less than
        # anything seen here, so XCLAIM leaves it with that updater.
        min_idle = min(p["time_since_delivered"] for p in pending)
        claimed = await self._xclaim(min_idle, ids) if ids else []
        if claimed:
            logger.info(
                "[updater] took over %d job(s) of consumer=%s (%s)",
                len(claimed),
                logs.shown(consumer),
                why,
            )
        for entry_id, fields in claimed:
            self._schedule(entry_id, fields, recovered=True)
        return len(pending), f"({pending[-1]['message_id'].decode()}"

    async def _xclaim(self, min_idle: int, ids: list[StreamIdT]) -> list[tuple[str, _RawFields]]:
        reply = cast(
            _Claimed,
            await self._jobs_redis.xclaim(
                contract.JOBS_STREAM, contract.JOBS_GROUP, self._consumer, min_idle, ids
            ),
        )
        # An entry deleted from the stream while pending comes back empty: no job left.
        return [(i.decode(), fields) for i, fields in reply if i is not None and fields is not None]

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

    def _schedule(self, entry_id: str, raw: dict[bytes, bytes], *, recovered: bool) -> None:
        if entry_id in self._scheduled:
            return
        try:
            job = contract.parse_job(decode_job_fields(raw), self._catalog)
        except contract.BadMessage as exc:
            reason = f"{logs.shorten(str(exc))} (fields={logs.shown_fields(raw)})"
            task = asyncio.create_task(self._drop(entry_id, reason))
        else:
            delay = self._settings.update_delay_seconds if job.delay is None else job.delay
            due = contract.entry_time_ms(entry_id) / 1000 + delay
            logger.info(
                "[updater] scheduled job=%s uri=%s target=%s in=%.2fs%s",
                entry_id,
                job.uri,
                logs.shorten(job.target),
                max(0.0, due - time.time()),
                " (recovered)" if recovered else "",
            )
            task = asyncio.create_task(self._apply_when_due(entry_id, job, due))
        self._scheduled[entry_id] = task
        task.add_done_callback(lambda done: self._finished(entry_id, done))

    def _finished(self, entry_id: str, task: asyncio.Task[None]) -> None:
        self._scheduled.pop(entry_id, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "[updater] job=%s failed: %s; it stays pending until this updater restarts",
                entry_id,
                logs.shorten(repr(task.exception())),
            )

    async def _apply_when_due(self, entry_id: str, job: contract.UpdateJob, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.time()))
        while True:
            stop_if_cancelled()
            try:
                await self._apply_batched(entry_id, job, due)
                return
            except (RedisError, OSError) as exc:
                logger.warning("[updater] job=%s not applied yet (%s); retrying", entry_id, exc)
                await asyncio.sleep(_RETRY_SECONDS)

    async def _apply_batched(self, entry_id: str, job: contract.UpdateJob, due: float) -> None:
        """Apply ``job`` with the other jobs due now: it joins the next batch (see
        :meth:`_apply_due`) and this returns once its batch was applied (or raises
        what applying it raised)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._due.append(_Due(entry_id, job, due, done))
        if self._applying is None or self._applying.done():
            self._applying = asyncio.create_task(self._apply_due())
        await done

    async def _apply_due(self) -> None:
        """Apply the jobs that fell due, many per round trip, until none is waiting:
        the jobs that fall due while one batch is applied make the next one."""
        while self._due:
            await asyncio.sleep(0)  # the jobs due at this same moment join the batch
            batch, self._due = fair_batch(self._due, _APPLY_BATCH)
            late = time.time() - min(item.due for item in batch)
            if late > _LATE_SECONDS:
                logger.warning(
                    "[updater] applying %d job(s) up to %.2fs after they were due "
                    "(the lab is behind; the report shows the lab's own lateness)",
                    len(batch),
                    late,
                )
            updates = [item for item in batch if item.job.action == contract.UPDATE_ACTION]
            others = [item for item in batch if item.job.action != contract.UPDATE_ACTION]
            by_uri: dict[str, list[_Due]] = {}
            for item in updates:
                by_uri.setdefault(item.job.uri, []).append(item)
            await asyncio.gather(
                *(
                    self._settle(items, self._apply_updates(uri, items))
                    for uri, items in by_uri.items()
                ),
                *(self._settle([item], self._apply_add(item)) for item in others),
            )

    @staticmethod
    async def _settle(items: list[_Due], applying: Awaitable[None]) -> None:
        """Run ``applying``; each of ``items`` learns how it went."""
        try:
            await applying
        except Exception as exc:  # each job's own task logs it, or retries it
            for item in items:
                if not item.done.done():
                    item.done.set_exception(exc)
        else:
            for item in items:
                if not item.done.done():
                    item.done.set_result(None)

    async def _apply_updates(self, uri: str, items: list[_Due]) -> None:
        """Update jobs of one URI, applied in one script; their log lines."""
        scopes = [
            await state.job_targets(self._redis, item.job, self._settings.state_scope)
            for item in items
        ]
        jobs = [
            state.DueJob(item.entry_id, targets, int(item.due * 1000), item.job.while_subscribed)
            for item, targets in zip(items, scopes, strict=True)
        ]
        applied = await state.apply_jobs(
            self._redis,
            uri,
            jobs,
            template=self._catalog[uri].updated_template(self._settings.updated_status),
            channel=self._settings.updates_channel,
            ttl_seconds=self._settings.state_ttl_seconds,
        )
        for job, versions in zip(jobs, applied, strict=True):
            if versions is None:
                logger.info("[updater] job=%s was already applied; skipped", job.entry_id)
                continue
            self.applied += 1
            for scope, version in zip(job.scopes, versions, strict=True):
                if version is None:
                    logger.info(
                        "[updater] job=%s uri=%s: session %s is no longer subscribed; "
                        "its state not updated",
                        job.entry_id,
                        uri,
                        logs.shorten(scope),
                    )
                    continue
                logger.info(
                    "[resource/update] uri=%s version=%d scope=%s job=%s published=%s",
                    uri,
                    version,
                    logs.shorten(scope),
                    job.entry_id,
                    self._settings.updates_channel,
                )
            if not job.scopes:
                logger.info("[updater] job=%s uri=%s had no subscribed session", job.entry_id, uri)

    async def _apply_add(self, item: _Due) -> None:
        """A scenario's new resource: listed for each scope, list_changed published."""
        entry_id, job = item.entry_id, item.job
        scopes = await state.job_targets(self._redis, job, self._settings.state_scope)
        applied = await state.apply_add(
            self._redis,
            entry_id,
            job,
            scopes,
            channel=self._settings.updates_channel,
            ttl_seconds=self._settings.state_ttl_seconds,
        )
        if not applied:
            logger.info("[updater] job=%s was already applied; skipped", entry_id)
            return
        self.applied += 1
        for scope in scopes:
            logger.info(
                "[resource/listed] uri=%s scope=%s job=%s published=%s",
                job.uri,
                logs.shorten(scope),
                entry_id,
                self._settings.updates_channel,
            )
        if not scopes:
            logger.info("[updater] job=%s uri=%s had no session to list it for", entry_id, job.uri)

    async def _drop(self, entry_id: str, reason: str) -> None:
        """Acknowledge and delete a bad job, then say so (one line, either way)."""
        try:
            await self._discard(entry_id)
        except (RedisError, OSError) as exc:
            logger.warning(
                "[updater] bad job %s: %s; not dropped (%s), it stays pending",
                entry_id,
                reason,
                exc,
            )
            return
        logger.warning("[updater] dropped bad job %s: %s", entry_id, reason)

    async def _discard(self, entry_id: str) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.xack(contract.JOBS_STREAM, contract.JOBS_GROUP, entry_id)
        pipe.xdel(contract.JOBS_STREAM, entry_id)
        await pipe.execute()


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
