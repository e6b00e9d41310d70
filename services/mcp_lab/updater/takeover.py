"""Taking jobs over: the updater's heartbeat, and the take-over of the jobs left
pending by an earlier updater of this consumer name (at start) or by a consumer
without heartbeat (at start and every ``take_over_every_seconds``), each scheduled
due when it always was. Holds :class:`TakeOver`, that part of
:class:`mcp_lab.updater.Updater`, and the shapes of the job client's replies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, TypedDict, cast

from redis.asyncio import Redis

from mcp_lab import contract, logs
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

# How many jobs stranded by a dead updater one look takes over at most (the rest
# wait for the next look, every ``take_over_every_seconds``).
_TAKE_OVER_BATCH = 100


class TakeOver:
    """The heartbeat and the take-over of pending jobs: a part of
    :class:`mcp_lab.updater.Updater`, which sets these attributes and schedules
    (``_schedule``, :class:`mcp_lab.updater.applying.Applying`) the jobs taken."""

    _settings: LabSettings
    _redis: Redis
    _jobs_redis: Redis
    _consumer: str
    _scheduled: dict[str, asyncio.Task[None]]
    _next_take_over: float
    _beater: bytes
    _beaten: bool
    _twin_seen: bool

    if TYPE_CHECKING:

        def _schedule(self, entry_id: str, raw: dict[bytes, bytes], *, recovered: bool) -> None: ...

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
