"""The updater process: applies each update job after its delay.

Jobs come from the Redis stream ``mcp:jobs`` through the consumer group
``updaters``, so a job added while no updater runs waits in the stream, and a
job this updater took but did not finish (it was stopped or killed) stays
pending and is taken again when an updater starts. Applying a job is one Redis
script that acknowledges it, bumps the versions and publishes; only the first
acknowledgement applies, so no job is applied twice.

Jobs are read as bytes (the Redis client does not decode them) and checked here:
an entry over ``contract.MAX_MESSAGE_BYTES``, with a field that is not UTF-8, or
that :func:`contract.parse_job` refuses is acknowledged and deleted, then logged
in one short line, so no entry can stop the updater or be taken again forever.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from services import contract, store
from services.eventlog import setup_logging
from services.settings import LabSettings

logger = logging.getLogger("mcp_lab")

_BLOCK_MS = 2000
_MAX_BACKOFF_SECONDS = 5.0
_RETRY_SECONDS = 1.0
_SHOWN_VALUE_CHARS = 60
_SHOWN_FIELDS = 6
_SHOWN_REASON_CHARS = 200


def _shorten(text: str, limit: int = _SHOWN_REASON_CHARS) -> str:
    """``text`` cut to ``limit`` characters for a log line (it may quote a job's fields)."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def _shown(value: bytes) -> str:
    """One raw field name or value for a log line: as text when it is UTF-8, cut short."""
    try:
        text: bytes | str = value.decode()
    except UnicodeDecodeError:
        text = value
    if len(text) <= _SHOWN_VALUE_CHARS:
        return repr(text)
    unit = "bytes" if isinstance(text, bytes) else "chars"
    return f"{text[:_SHOWN_VALUE_CHARS]!r}...({len(text)} {unit})"


def _shown_fields(raw: dict[bytes, bytes]) -> str:
    """A job entry's fields for a log line: the first few, each cut short."""
    items = [f"{_shown(k)}: {_shown(v)}" for k, v in list(raw.items())[:_SHOWN_FIELDS]]
    if len(raw) > _SHOWN_FIELDS:
        items.append(f"...({len(raw)} fields)")
    return "{" + ", ".join(items) + "}"


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
            raise contract.BadMessage(f"field name {_shown(key)} is not UTF-8") from exc
        try:
            fields[name] = value.decode()
        except UnicodeDecodeError as exc:
            raise contract.BadMessage(f"field {_shown(key)} is not UTF-8") from exc
    return fields


class Updater:
    """Reads jobs from the stream and applies each one when it is due."""

    def __init__(self, settings: LabSettings, redis: Redis) -> None:
        self._settings = settings
        self._redis = redis
        # Jobs are read undecoded, so one entry that is not UTF-8 is a bad job,
        # not an error raised on every read of the stream.
        self._jobs_redis = store.connect(settings.redis_url, decode=False)
        self._consumer = settings.updater_consumer
        self._scheduled: dict[str, asyncio.Task[None]] = {}
        self.applied = 0

    async def run(self) -> None:
        """Work until cancelled, reconnecting after any error (Redis or not)."""
        backoff = 0.2
        while True:
            try:
                await store.ensure_job_group(self._redis)
                await self._take_over_pending()
                logger.info(
                    "[updater] ready stream=%s group=%s consumer=%s delay=%ss",
                    contract.JOBS_STREAM,
                    contract.JOBS_GROUP,
                    self._consumer,
                    self._settings.update_delay_seconds,
                )
                backoff = 0.2
                await self._read_new_jobs()
            except Exception as exc:
                if isinstance(exc, (RedisError, OSError)):
                    logger.warning(
                        "[updater] redis unavailable (%s); retrying in %.1fs", exc, backoff
                    )
                else:
                    logger.exception("[updater] unexpected error; restarting in %.1fs", backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)

    async def close(self) -> None:
        """Release the updater's own Redis connection (the one that reads jobs)."""
        await self._jobs_redis.aclose()

    async def _take_over_pending(self) -> None:
        """Schedule every job that was taken but never acknowledged, by any consumer."""
        start = "0-0"
        while True:
            reply = await self._jobs_redis.xautoclaim(
                contract.JOBS_STREAM,
                contract.JOBS_GROUP,
                self._consumer,
                min_idle_time=0,
                start_id=start,
                count=100,
            )
            start, entries = reply[0].decode(), reply[1]
            for entry_id, fields in entries:
                if entry_id is not None and fields is not None:
                    self._schedule(entry_id.decode(), fields, recovered=True)
            if start == "0-0":
                return

    async def _read_new_jobs(self) -> None:
        heartbeat = contract.updater_heartbeat_key(self._consumer)
        while True:
            await self._redis.set(heartbeat, "1", ex=contract.UPDATER_HEARTBEAT_SECONDS)
            reply = await self._jobs_redis.xreadgroup(
                contract.JOBS_GROUP,
                self._consumer,
                {contract.JOBS_STREAM: ">"},
                count=100,
                block=_BLOCK_MS,
            )
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    self._schedule(entry_id.decode(), fields, recovered=False)

    def _schedule(self, entry_id: str, raw: dict[bytes, bytes], *, recovered: bool) -> None:
        if entry_id in self._scheduled:
            return
        try:
            job = contract.parse_job(decode_job_fields(raw))
        except contract.BadMessage as exc:
            reason = f"{_shorten(str(exc))} (fields={_shown_fields(raw)})"
            task = asyncio.create_task(self._drop(entry_id, reason))
        else:
            delay = self._settings.update_delay_seconds if job.delay is None else job.delay
            due = contract.entry_time_ms(entry_id) / 1000 + delay
            logger.info(
                "[updater] scheduled job=%s uri=%s target=%s in=%.2fs%s",
                entry_id,
                job.uri,
                _shorten(job.target),
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
                "[updater] job=%s failed: %s; it stays pending until an updater restarts",
                entry_id,
                _shorten(repr(task.exception())),
            )

    async def _apply_when_due(self, entry_id: str, job: contract.UpdateJob, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.time()))
        while True:
            try:
                await self._apply(entry_id, job)
                return
            except (RedisError, OSError) as exc:
                logger.warning("[updater] job=%s not applied yet (%s); retrying", entry_id, exc)
                await asyncio.sleep(_RETRY_SECONDS)

    async def _apply(self, entry_id: str, job: contract.UpdateJob) -> None:
        scopes = await store.job_targets(self._redis, job, self._settings.state_scope)
        versions = await store.apply_job(
            self._redis,
            entry_id,
            job,
            scopes,
            updated_status=self._settings.updated_status,
            channel=self._settings.updates_channel,
            ttl_seconds=self._settings.state_ttl_seconds,
        )
        if versions is None:
            logger.info("[updater] job=%s was already applied; skipped", entry_id)
            return
        self.applied += 1
        for scope, version in zip(scopes, versions, strict=True):
            logger.info(
                "[resource/update] uri=%s version=%d scope=%s job=%s published=%s",
                job.uri,
                version,
                _shorten(scope),
                entry_id,
                self._settings.updates_channel,
            )
        if not scopes:
            logger.info("[updater] job=%s uri=%s had no subscribed session", entry_id, job.uri)

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


async def run_updater(settings: LabSettings) -> None:
    """Run one updater until cancelled."""
    redis = store.connect(settings.redis_url)
    updater = Updater(settings, redis)
    try:
        await updater.run()
    finally:
        await updater.close()
        await redis.aclose()


def main(settings: LabSettings) -> None:
    """Entry point of ``mcp-lab updater``."""
    setup_logging(settings.log_level)
    try:
        asyncio.run(run_updater(settings))
    except KeyboardInterrupt:
        pass
