"""Applying jobs: a job taken is parsed (a bad one acknowledged, deleted and
logged in one line) and waits out its delay; the jobs that fall due together are
applied in fair batches, one script per URI (:mod:`mcp_lab.state_jobs`), and
logged. Holds :class:`Applying`, that part of :class:`mcp_lab.updater.Updater`,
and the helpers it is built on (:func:`decode_job_fields`, :func:`fair_batch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, logs, state, state_jobs
from mcp_lab.catalog import Catalog
from mcp_lab.process.reconnect import stop_if_cancelled
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.updater")


_RETRY_SECONDS = 1.0
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
    # The store's epoch when the job was read (state.store_epoch): a job Redis no
    # longer knows, from a store since come back without its data, was lost, not applied.
    epoch: str | None = None


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


class Applying:
    """Scheduling, batching and applying the jobs taken: a part of
    :class:`mcp_lab.updater.Updater`, which sets these attributes."""

    _settings: LabSettings
    _catalog: Catalog
    _redis: Redis
    _scheduled: dict[str, asyncio.Task[None]]
    _due: list[_Due]
    _applying: asyncio.Task[None] | None
    _epoch: str | None
    applied: int

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
            epoch = self._epoch
            task = asyncio.create_task(self._apply_when_due(entry_id, job, due, epoch))
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

    async def _apply_when_due(
        self, entry_id: str, job: contract.UpdateJob, due: float, epoch: str | None = None
    ) -> None:
        await asyncio.sleep(max(0.0, due - time.time()))
        retries = 0
        while True:
            stop_if_cancelled()
            try:
                await self._apply_batched(entry_id, job, due, epoch)
            except (RedisError, OSError) as exc:
                # A full Redis refuses the job before acknowledging it (state_jobs):
                # it waits, pending, until Redis takes writes again. One line when it
                # starts waiting, one when it is applied.
                level = logging.WARNING if retries == 0 else logging.DEBUG
                logger.log(level, "[updater] job=%s not applied yet (%s); retrying", entry_id, exc)
                retries += 1
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            if retries:
                logger.warning(
                    "[updater] job=%s applied after %d retr%s, %.1f s after it was due",
                    entry_id,
                    retries,
                    "y" if retries == 1 else "ies",
                    max(0.0, time.time() - due),
                )
            return

    async def _apply_batched(
        self, entry_id: str, job: contract.UpdateJob, due: float, epoch: str | None = None
    ) -> None:
        """Apply ``job`` with the other jobs due now: it joins the next batch (see
        :meth:`_apply_due`) and this returns once its batch was applied (or raises
        what applying it raised)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._due.append(_Due(entry_id, job, due, done, epoch))
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
            await state_jobs.job_targets(self._redis, item.job, self._settings.state_scope)
            for item in items
        ]
        jobs = [
            state_jobs.DueJob(
                item.entry_id, targets, int(item.due * 1000), item.job.while_subscribed
            )
            for item, targets in zip(items, scopes, strict=True)
        ]
        applied = await state_jobs.apply_jobs(
            self._redis,
            uri,
            jobs,
            template=self._catalog[uri].updated_template(self._settings.updated_status),
            channel=self._settings.updates_channel,
            ttl_seconds=self._settings.state_ttl_seconds,
        )
        lost = await self._lost_with_store(
            [item for item, versions in zip(items, applied, strict=True) if versions is None]
        )
        for job, versions in zip(jobs, applied, strict=True):
            if versions is None:
                self._not_applied(job.entry_id, lost)
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
        scopes = await state_jobs.job_targets(self._redis, job, self._settings.state_scope)
        applied = await state_jobs.apply_add(
            self._redis,
            entry_id,
            job,
            scopes,
            channel=self._settings.updates_channel,
            ttl_seconds=self._settings.state_ttl_seconds,
        )
        if not applied:
            self._not_applied(entry_id, await self._lost_with_store([item]))
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

    async def _lost_with_store(self, items: list[_Due]) -> set[str]:
        """Which of ``items`` (jobs the apply script did not acknowledge) were lost with
        the store rather than applied: read under a store epoch that Redis no longer
        has (it came back without its data). One read of the epoch, none if no item."""
        read_under = {item.epoch for item in items if item.epoch is not None}
        if not read_under:
            return set()
        now = await state.store_epoch(self._redis)
        return {item.entry_id for item in items if item.epoch not in (None, now)}

    @staticmethod
    def _not_applied(entry_id: str, lost: set[str]) -> None:
        """The line of a job the apply script did not acknowledge."""
        if entry_id not in lost:
            logger.info("[updater] job=%s was already applied; skipped", entry_id)
            return
        logger.warning(
            "[updater] job=%s was lost with the store (Redis came back without its "
            "data); not applied: the server queues again the updates of the "
            "subscriptions it holds",
            entry_id,
        )

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
