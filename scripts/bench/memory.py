"""KB per idle subscribed session: server RSS and Redis ``used_memory`` growth."""

from __future__ import annotations

import asyncio

from bench.procs import rss_kb
from bench.sessions import setup_sessions, subscribe_all


async def memory_per_session(
    port: int, pid: int, n: int, concurrency: int, redis_url: str | None
) -> tuple[float, float | None]:
    """KB per idle subscribed session (GET stream open, subscribed to the status
    resource): server RSS growth, Redis used_memory growth."""
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url) if redis_url else None
    before_rss = rss_kb(pid)
    before_redis = (await redis.info("memory"))["used_memory"] if redis else 0
    clients, _failed, _ = await setup_sessions(port, n, concurrency, name="memory")
    clients, _refused = await subscribe_all(clients)  # idle SUBSCRIBED sessions
    ready = len(clients)
    rss = (rss_kb(pid) - before_rss) / max(ready, 1)
    redis_kb = None
    if redis is not None:
        redis_kb = (
            ((await redis.info("memory"))["used_memory"] - before_redis) / 1024 / max(ready, 1)
        )
        await redis.aclose()
    await asyncio.gather(*(c.end() for c in clients))
    return rss, redis_kb
