"""The evidence record bounded by its size in Redis, as well as by its count.

Every ``XADD`` to ``mcp:events`` keeps at most ``MCP_TEST_EVENTS_MAX`` entries,
and every entry is bounded (the values a client chooses are cut,
services/mcp_lab/untrusted.py). On top of that, each server replica asks Redis every
few seconds how much memory the stream takes (``MEMORY USAGE``, an estimate
from a sample of its nodes) and, past ``MCP_TEST_EVENTS_MAX_BYTES``, trims the
oldest entries until it fits again, with one log line. Several replicas may trim
at once; each trims to the same bound, so that does no harm.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from mcp_lab import contract
from mcp_lab.process.reconnect import stop_if_cancelled

logger = logging.getLogger("mcp_lab.evidence")

CHECK_EVERY_SECONDS = 2.0
# Stream nodes MEMORY USAGE looks at (the rest is extrapolated from them).
_SAMPLES = 32
# Trim to this share of the bound, so that one check does not trim again at once.
_HEADROOM = 0.9


async def trim_to_bytes(redis: Redis, key: str, max_bytes: int) -> int:
    """Trim the stream ``key`` to about ``max_bytes`` of Redis memory, dropping its
    oldest entries; how many entries were dropped (0 when it fits)."""
    used = await redis.memory_usage(key, samples=_SAMPLES)
    if not used or used <= max_bytes:
        return 0
    length = int(await redis.xlen(key))
    keep = int(length * max_bytes / used * _HEADROOM)
    dropped = int(await redis.xtrim(key, maxlen=keep, approximate=False))
    logger.warning(
        "[evidence] %s took %d bytes of Redis memory, over MCP_TEST_EVENTS_MAX_BYTES=%d: "
        "trimmed %d of its %d oldest events",
        key,
        used,
        max_bytes,
        dropped,
        length,
    )
    return dropped


async def keep_under(
    redis: Redis,
    max_bytes: int,
    key: str = contract.EVENTS_STREAM,
    every: float = CHECK_EVERY_SECONDS,
) -> None:
    """:func:`trim_to_bytes` every ``every`` seconds until cancelled. A Redis that
    refuses ``MEMORY USAGE`` (some hosted ones) leaves the count bound alone, said once."""
    while True:
        stop_if_cancelled()
        await asyncio.sleep(every)
        try:
            await trim_to_bytes(redis, key, max_bytes)
        except ResponseError as exc:
            logger.warning(
                "[evidence] cannot measure %s (%s): bounded by MCP_TEST_EVENTS_MAX only", key, exc
            )
            return
        except (RedisError, OSError) as exc:
            logger.debug("[evidence] size check of %s failed (%s); retrying", key, exc)
