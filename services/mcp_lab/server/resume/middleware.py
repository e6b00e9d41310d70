"""Resuming a session's GET stream, on this replica or on any other.

Two jobs, both on ``GET <mcp path>``:

* **Priming.** A fresh GET stream of a session held here starts with an event
  that has an id and no data, so a client whose stream drops before any
  notification still has a ``Last-Event-ID`` to resume from. (The SDK primes
  POST streams only.) Only sessions that negotiated 2025-11-25 or later get it
  (see :mod:`mcp_lab.server.resume.priming`).
* **Resuming elsewhere.** A GET with ``Last-Event-ID`` for a session held by
  another live replica is served here from Redis: the events the client missed,
  then each new one as the owner stores it, until the client leaves or the
  session ends. For a session held here the SDK replays from the same store;
  for a session no live replica holds the SDK answers 404.

A replica is live while its heartbeat key exists (``contract.replica_heartbeat_key``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any, cast

from mcp.server.streamable_http import GET_STREAM_KEY
from mcp_types import JSONRPCMessage
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_lab import contract, protocol, sse
from mcp_lab.logs import shown
from mcp_lab.process.reconnect import stop_if_cancelled
from mcp_lab.server.resume.eventstore import (
    OnReplayed,
    RedisEventStore,
    decode,
    encode,
    entry_of,
    events_after,
    public_id,
)
from mcp_lab.server.resume.get_streams import report_resumed_stream
from mcp_lab.server.resume.priming import takes_priming
from mcp_lab.server.sessions import SessionRegistry

logger = logging.getLogger("mcp_lab.resume")

# How long one blocking read of a tailed stream waits before the owner is checked again.
_TAIL_BLOCK_MS = 2000

# An XREAD reply of the server's client (decoded, RESP2): a [key, entries] pair per
# stream read, empty when the block timed out.
_Batches = list[tuple[str, list[tuple[str, dict[str, str]]]]]


def new_replica_id() -> str:
    return uuid.uuid4().hex[:12]


async def heartbeat(
    redis: Redis, replica: str, seconds: int = contract.REPLICA_HEARTBEAT_SECONDS
) -> None:
    """Keep ``replica``'s heartbeat key (lifetime ``seconds``) alive until cancelled;
    deleted on the way out."""
    key = contract.replica_heartbeat_key(replica)
    try:
        while True:
            with contextlib.suppress(RedisError, OSError):
                await redis.set(key, "1", ex=seconds)
            stop_if_cancelled()
            await asyncio.sleep(seconds / 3)
    finally:
        with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
            await redis.delete(key)


async def owner_alive_elsewhere(redis: Redis, session: str, replica: str) -> bool:
    """Whether another live replica holds ``session``: its heartbeat is there, and its
    relay listens on its own channel. The heartbeat outlives a killed process by up to
    its lifetime; the channel's subscriber is gone as soon as the process is, so a
    resume of a session that died with its server is answered 404 at once."""
    # The owner's replica id: str, as the server's client decodes replies.
    owner = cast(str | None, await redis.get(contract.session_owner_key(session)))
    if not owner or owner == replica:
        return False
    if not await redis.exists(contract.replica_heartbeat_key(owner)):
        return False
    listening = await redis.pubsub_numsub(contract.replica_channel(owner))
    return bool(listening and listening[0][1])


class Resume:
    """GET of the MCP path (the front door, ``mcp_lab.server.asgi``, sends only
    those here, through :class:`~mcp_lab.server.resume.get_streams.StreamLog`):
    primes fresh GET streams, serves remote resumes, passes the rest to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: SessionRegistry,
        redis: Redis,
        replica: str,
        retry_ms: int,
        store_for: Callable[[str], RedisEventStore],
        on_replayed: OnReplayed,
        block_ms: int = _TAIL_BLOCK_MS,
    ) -> None:
        self._app = app
        self._block_ms = block_ms
        self._registry = registry
        self._redis = redis
        self._replica = replica
        self._retry_ms = retry_ms
        self._store_for = store_for
        self._on_replayed = on_replayed

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, session: str, last_event_id: str
    ) -> None:
        """Serve one GET with ``session`` and ``last_event_id`` ("" when absent)."""
        peer = self._registry.peer(session) if session else None
        held_here = peer is not None
        if peer is not None and not last_event_id:
            primed = takes_priming(peer.protocol)
            await self._app(scope, receive, self._priming(session, send) if primed else send)
            return
        if session and last_event_id and not held_here:
            try:
                elsewhere = await owner_alive_elsewhere(self._redis, session, self._replica)
            except (RedisError, OSError) as exc:
                logger.warning("[resume] cannot look up session=%s: %s", session, exc)
                elsewhere = False
            if elsewhere:
                await self._serve_remote(session, last_event_id, receive, send)
                return
        await self._app(scope, receive, send)

    def _priming(self, session: str, send: Send) -> Send:
        """``send``, with a priming event written right after a 200 response starts."""
        store = self._store_for(session)

        async def send_primed(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start" and message["status"] == 200:
                event_id = await store.store_event(GET_STREAM_KEY, None)
                if event_id:
                    body = sse.frame(
                        "", event="message", event_id=event_id, retry_ms=self._retry_ms
                    )
                    await send({"type": "http.response.body", "body": body, "more_body": True})

        return send_primed

    async def _serve_remote(
        self, session: str, last_event_id: str, receive: Receive, send: Send
    ) -> None:
        """Replay what ``session`` missed after ``last_event_id``, then follow its stream."""
        try:
            found = await events_after(self._redis, session, last_event_id)
        except (RedisError, OSError, UnicodeDecodeError) as exc:
            logger.warning("[resume] replay failed for session=%s: %s", session, exc)
            found = None
        if found is None:
            logger.warning(
                "[resume] session=%s last_event_id=%s unknown, expired, trimmed or not its "
                "own; following its GET stream from now",
                session,
                shown(last_event_id, 64),
            )
            missed: list[tuple[str, JSONRPCMessage]] = []
            stream, cursor = GET_STREAM_KEY, "$"
        else:
            stream, missed = found
            # The stream is read on from the last entry sent (ids without their tag).
            last_sent = entry_of(missed[-1][0] if missed else last_event_id)
            cursor = last_sent[0] if last_sent is not None else "$"
        await report_resumed_stream(stream)
        logger.info(
            "[resume] serving session=%s for its owner replica: stream=%s replayed=%d",
            session,
            stream,
            len(missed),
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache, no-transform"),
                    (protocol.SESSION_HEADER_BYTES, session.encode("latin-1")),
                ],
            }
        )
        for event_id, message in missed:
            body = sse.frame(encode(message), event="message", event_id=event_id)
            await send({"type": "http.response.body", "body": body, "more_body": True})
            await self._on_replayed(session, message)

        async def until_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(until_disconnect())
        try:
            await self._follow(session, stream, cursor, send, watcher)
        finally:
            watcher.cancel()
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _read(self, key: str, cursor: str) -> _Batches:
        """The entries of ``key`` past ``cursor``, waiting up to ``block_ms`` for some."""
        reply = await self._redis.xread({key: cursor}, block=self._block_ms, count=100)
        return cast(_Batches, reply)

    async def _follow(
        self, session: str, stream: str, cursor: str, send: Send, watcher: asyncio.Future[None]
    ) -> None:
        """Write each new event of ``stream`` until the client leaves or the session ends."""
        key = contract.resume_key(session)
        while not watcher.done():
            reading = asyncio.ensure_future(self._read(key, cursor))
            racing: set[asyncio.Future[Any]] = {reading, watcher}  # results differ in type
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if watcher.done():
                reading.cancel()
                return
            try:
                batches = reading.result()
                if not batches and not await owner_alive_elsewhere(
                    self._redis, session, self._replica
                ):
                    logger.info("[resume] session=%s ended on its owner; stream closed", session)
                    return
            except (RedisError, OSError, UnicodeDecodeError) as exc:
                logger.warning("[resume] following session=%s failed: %s", session, exc)
                return
            for _key, entries in batches:
                for entry_id, fields in entries:
                    cursor = entry_id
                    if fields.get(contract.RESUME_STREAM_FIELD) != stream:
                        continue
                    message = decode(fields.get(contract.RESUME_MESSAGE_FIELD, ""))
                    if message is None:
                        continue
                    event_id = public_id(entry_id, fields.get(contract.RESUME_TAG_FIELD, ""))
                    body = sse.frame(encode(message), event="message", event_id=event_id)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    await self._on_replayed(session, message)
