"""The ``dropped-stream`` scenario's side of a listen stream (``Scenario.listen_drop``).

A 2026-07-28 client's first listen stream is dropped, ``after`` seconds past its
acknowledgement and before its update: the stream ends without the final result
(:func:`mcp_lab.server.hangup.hang_up`). "Dropped once" is noted in Redis
(``mcp:listen-dropped:{session}``, with the versions the stream had been told of), so every
replica and every stdio server process of the lab knows it: the client's next listen
is not dropped again. The client's subscription is kept in Redis for ``keep`` seconds
(its update still happens at its time), and when the client listens again after the
update came, the lab tells the new stream of it at once: the update it would have
missed is kept for it, not lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, protocol
from mcp_lab.contract import Peer
from mcp_lab.logs import event
from mcp_lab.scenarios.scenario import ListenDrop
from mcp_lab.server import hangup
from mcp_lab.server.sessions import Subscriber

logger = logging.getLogger("mcp_lab.listen")
# How long the lab remembers that it dropped a client's stream (it drops one per client).
_NOTED_SECONDS = 600

Record = Callable[[Peer], Awaitable[None]]
Tell = Callable[[Subscriber, str, int], Awaitable[None]]
Forget = Callable[[Peer, str], Awaitable[None]]


class Stream(Protocol):
    """What of a listen stream's bus a drop needs (:class:`mcp_lab.server.listen.StreamBus`)."""

    updated: anyio.Event  # set once it carried a resource update
    dropped: bool  # set here when the lab drops it


class ListenDrops:
    """Drops each client's first listen stream once, and hands a client that listens
    again the update its dropped stream missed (see the module docstring)."""

    def __init__(
        self, redis: Redis, drop: ListenDrop, record: Record, tell: Tell, forget: Forget
    ) -> None:
        """``record``: the evidence of a drop; ``tell``: notify a subscriber of a
        version; ``forget``: drop a kept subscription from Redis (unless a stream of the
        client holds it again by then)."""
        self._redis = redis
        self._drop = drop
        self._record = record
        self._tell = tell
        self._forget = forget
        self._kept: set[asyncio.Task[None]] = set()

    async def kept_for(self, subscriber: Subscriber) -> bool:
        """Whether ``subscriber``'s client had a stream dropped before; if so, tell it
        now of each update that came since (its stream is not dropped again). False:
        this is its first stream, the one to drop."""
        key = _key(subscriber.peer.session)
        try:
            raw = await self._redis.get(key)
        except (RedisError, OSError) as exc:
            logger.warning("[lab] dropped-stream: could not read %s (%s); not dropping", key, exc)
            return True
        if raw is None:
            return False
        told = _versions(raw)
        for uri in sorted(subscriber.uris):
            now = subscriber.known.get(uri, 0)
            if now > told.get(uri, now):
                event(protocol.LISTEN, f"uri={uri}", subscriber.peer, f"kept update version={now}")
                await self._tell(subscriber, uri, now)
        return True

    async def drop_before_update(self, subscriber: Subscriber, stream: Stream) -> None:
        """``after`` seconds past the acknowledgement, unless its update came first:
        note the drop in Redis, record it and hang up (the stream ends without its
        final result; ``stream.dropped`` is set first). Cancelled with the stream."""
        with anyio.move_on_after(self._drop.after):
            await stream.updated.wait()
        if stream.updated.is_set():
            return  # too late to drop before the update: the stream is served as usual
        peer = subscriber.peer
        if not hangup.can_hang_up():
            logger.warning("[lab] dropped-stream: this transport cannot drop a listen stream")
            return
        told = {uri: subscriber.known.get(uri, 0) for uri in sorted(subscriber.uris)}
        try:
            noted = await self._redis.set(
                _key(peer.session),
                json.dumps(told),
                nx=True,
                ex=_NOTED_SECONDS,
            )
        except (RedisError, OSError) as exc:
            logger.warning("[lab] dropped-stream: could not note the drop (%s); not dropping", exc)
            return
        if not noted:  # another stream of the client was dropped meanwhile
            return
        event(protocol.LISTEN, "dropped without its final result (dropped-stream)", peer)
        await self._record(peer)
        stream.dropped = True
        hangup.hang_up()

    def keep(self, peer: Peer, uris: list[str]) -> None:
        """Keep a dropped stream's subscriptions in Redis for ``keep`` seconds, then
        forget each unless the client listens for it again by then."""
        task = asyncio.create_task(self._forget_later(peer, uris), name="dropped-stream")
        self._kept.add(task)
        task.add_done_callback(self._kept.discard)

    async def _forget_later(self, peer: Peer, uris: list[str]) -> None:
        await asyncio.sleep(self._drop.keep)  # the scenario's grace, not a synchronisation
        for uri in uris:
            await self._forget(peer, uri)


def _key(session: str) -> str:
    return f"{contract.DROPPED_KEY_PREFIX}{session}"


def _versions(raw: bytes | str) -> dict[str, int]:
    """The versions a dropped stream had been told of, as noted (garbage: none)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, int)}
