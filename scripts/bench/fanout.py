"""The fan-out: N sessions subscribed in shared scope, one publish, each one's latency."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from rawmcp import STATUS_URI, RawClient

from bench.sessions import setup_sessions, subscribe_all

UPDATES_CHANNEL = "mcp:resources:updated"


async def fanout(
    port: int,
    n: int,
    redis_url: str,
    concurrency: int,
    timeout: float,
    *,
    on_subscribed: Callable[[list[RawClient]], Awaitable[None]] | None = None,
    receivers: list[int] | None = None,
) -> list[float]:
    """Latencies (s) from one publish to each of ``n`` subscribed sessions' notification.
    ``on_subscribed`` is awaited with the subscribed clients before the publish; the
    publish's receiver count (relays listening) is appended to ``receivers``."""
    from redis.asyncio import Redis

    clients, failed, _ = await setup_sessions(port, n, concurrency, name="fanout")
    subscribed, refused = await subscribe_all(clients)
    if failed or refused:
        print(f"  fan-out: {sum(failed.values())} setup failures, {sum(refused.values())} refused")
        for reason, count in (failed + refused).most_common(3):
            print(f"  {count} x {reason}")
    await asyncio.gather(*(c.wait_notification(1, 2.0) for c in subscribed))  # floor notifies now
    for client in subscribed:
        client.notifications.clear()
    if on_subscribed is not None:
        await on_subscribed(subscribed)
    redis = Redis.from_url(redis_url)
    version = 1_000_000 + int(time.time())
    body = json.dumps({"uri": STATUS_URI, "version": version})
    await redis.hset(f"mcp:state:shared:{STATUS_URI}", mapping={"version": version, "text": "x"})
    loop = asyncio.get_running_loop()
    published = loop.time()
    listening = await redis.publish(UPDATES_CHANNEL, body)
    if receivers is not None:
        receivers.append(int(listening))
    await redis.aclose()
    await asyncio.gather(*(c.wait_notification(1, timeout) for c in subscribed))
    latencies = [c.notifications[0][0] - published for c in subscribed if c.notifications]
    missing = len(subscribed) - len(latencies)
    if missing:
        print(f"  fan-out: {missing} notifications missing")
    await asyncio.gather(*(c.end() for c in clients))
    return latencies
