"""Resumable streams: the SSE events sent to each session, kept in Redis.

The mcp SDK calls an ``EventStore`` for every SSE event it writes to a Streamable
HTTP session (notifications on the GET stream, responses on POST streams) and
again when a client reconnects with ``Last-Event-ID``. The lab keeps one Redis
stream per session (``contract.resume_key``), capped in length and expiring a
while after the last event, so any server replica can read what a session was
sent. The event id a client sees is the Redis entry id and a random tag kept
in the entry (``<entry id>_<tag>``): entry ids are times, guessed in a few
tries, and a resume must name an event the session was really sent. An id
whose tag does not match is treated as one no longer kept.

Storing never raises: the SDK stores before it sends, so a Redis error here must
not stop the notification (it only cannot be replayed later, and says so).
Stores go through the server's :class:`~mcp_lab.process.writer.BatchWriter`: a burst of
events shares pipelines instead of needing a connection each, and each store
still waits for its own entry id, which the SDK sends with the event.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, cast

from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import JSONRPCMessage
from pydantic import TypeAdapter, ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract
from mcp_lab.logs import shown
from mcp_lab.process.writer import BatchWriter
from mcp_lab.server.resume.get_streams import report_resumed_stream

logger = logging.getLogger("mcp_lab.resume")

# Longest a replay waits for Redis. A store is bounded by the batch writer instead
# (mcp_lab.process.writer.BATCH_TIMEOUT_SECONDS): a notification is sent only after it
# has been stored, so that bounds what a hung Redis can add to its latency.
REDIS_TIMEOUT_SECONDS = 2.0

_messages: TypeAdapter[JSONRPCMessage] = TypeAdapter(JSONRPCMessage)
_TAG_BYTES = 8


class _Losses:
    """Events not kept since the last one that was, of any session (see store_event)."""

    since_kept = 0


_losses = _Losses()


def new_tag() -> str:
    """A random tag for one kept event."""
    return secrets.token_hex(_TAG_BYTES)


def public_id(entry_id: str, tag: str) -> EventId:
    """The id a client sees for the kept event ``entry_id`` with ``tag``."""
    return f"{entry_id}_{tag}"


def entry_of(event_id: str) -> tuple[str, str] | None:
    """The entry id and tag of an id :func:`public_id` made; None for anything else."""
    entry_id, underscore, tag = event_id.partition("_")
    if not underscore or not contract.is_event_id(entry_id) or len(tag) != 2 * _TAG_BYTES:
        return None
    if not all(c in "0123456789abcdef" for c in tag):
        return None
    return entry_id, tag


def _id_of(entry_id: str, fields: dict[str, str]) -> EventId:
    return public_id(entry_id, fields.get(contract.RESUME_TAG_FIELD, ""))


# The largest event kept for resumption. Every answer the lab writes is far smaller
# (what a client chose is cut, services/mcp_lab/untrusted.py); a larger one is sent but not
# kept, so a session's stream holds at most MCP_TEST_RESUME_MAX_EVENTS of this size.
MAX_EVENT_BYTES = 64 * 1024

# Called for each message written to a client from the store: (session, message).
OnReplayed = Callable[[str, JSONRPCMessage], Awaitable[None]]


def encode(message: JSONRPCMessage | None) -> str:
    """A message as kept in the resume stream (``""`` for a priming event).

    Unset fields stay unset, so a replayed message is the one first sent (a
    notification keeps its ``params``, and nothing gains a ``null``)."""
    if message is None:
        return ""
    return message.model_dump_json(by_alias=True, exclude_unset=True)


def decode(data: str) -> JSONRPCMessage | None:
    """The message of a resume-stream entry; ``None`` for a priming event or a bad entry."""
    if not data:
        return None
    try:
        return _messages.validate_json(data)
    except ValidationError as exc:
        logger.warning("[resume] skipped an unreadable stored event: %s", exc.errors()[:1])
        return None


async def events_after(
    redis: Redis, session: str, last_event_id: str
) -> tuple[StreamId, list[tuple[EventId, JSONRPCMessage]]] | None:
    """The stream ``last_event_id`` belongs to and the messages sent on it since
    (each with the id the client sees).

    ``None`` when the id is malformed, unknown, not the session's (its tag does not
    match), or no longer kept (expired or trimmed): the caller cannot tell which
    events the client missed.
    """
    parsed = entry_of(last_event_id)
    if parsed is None:
        return None
    entry_id, tag = parsed
    key = contract.resume_key(session)
    # The server's client decodes replies: entries are (id, {field: value}) of str.
    first = cast(
        list[tuple[str, dict[str, str]]],
        await redis.xrange(key, min=entry_id, max=entry_id, count=1),
    )
    if not first or not hmac.compare_digest(
        first[0][1].get(contract.RESUME_TAG_FIELD, "").encode(), tag.encode()
    ):
        return None
    stream = first[0][1].get(contract.RESUME_STREAM_FIELD, "")
    later = cast(
        list[tuple[str, dict[str, str]]], await redis.xrange(key, min=f"({entry_id}", max="+")
    )
    events: list[tuple[EventId, JSONRPCMessage]] = []
    for later_id, fields in later:
        if fields.get(contract.RESUME_STREAM_FIELD) != stream:
            continue
        message = decode(fields.get(contract.RESUME_MESSAGE_FIELD, ""))
        if message is not None:
            events.append((_id_of(later_id, fields), message))
    return stream, events


class RedisEventStore(EventStore):
    """The event store of ONE session; each session's transport gets its own."""

    def __init__(
        self,
        redis: Redis,
        session: str,
        replica: str,
        *,
        max_events: int,
        ttl_seconds: int,
        on_replayed: OnReplayed,
        writer: BatchWriter | None = None,
    ) -> None:
        self._redis = redis
        self._writer = writer or BatchWriter(redis)
        self._session = session
        self._replica = replica
        self._max_events = max_events
        self._ttl = ttl_seconds
        self._on_replayed = on_replayed
        # Streams whose events are not kept: requests being answered with one JSON
        # body (mcp_adapter.answer_posts_as_json), which no client can resume.
        self.unkept_streams: set[str] = set()

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep one event; its id, or ``""`` (no id, not replayable) if Redis failed
        or the stream is one of :attr:`unkept_streams`."""
        if stream_id in self.unkept_streams:
            return ""
        key = contract.resume_key(self._session)
        data = encode(message)
        if len(data) > MAX_EVENT_BYTES:
            logger.warning(
                "[resume] event of %d bytes not kept (over %d): session=%s stream=%s; "
                "it cannot be replayed",
                len(data),
                MAX_EVENT_BYTES,
                self._session,
                stream_id,
            )
            return ""
        tag = new_tag()
        fields = {
            contract.RESUME_STREAM_FIELD: str(stream_id),
            contract.RESUME_MESSAGE_FIELD: data,
            contract.RESUME_TAG_FIELD: tag,
        }
        owner = contract.session_owner_key(self._session)

        def add(pipe: Any) -> int:
            pipe.xadd(key, fields, maxlen=self._max_events, approximate=True)
            pipe.expire(key, self._ttl)
            pipe.set(owner, self._replica, ex=self._ttl)
            return 3

        try:
            # No timeout of its own: in a burst the store waits its turn in the
            # writer's queue, and the writer bounds each round trip to Redis.
            entry_id, *_ = await self._writer.submit(add)
        except (RedisError, OSError, TimeoutError) as exc:
            # An outage is not a line per event: the first loss after a store that
            # worked, then DEBUG until one works again (the server's probe logs the
            # outage's start and end).
            level = logging.DEBUG if _losses.since_kept else logging.WARNING
            _losses.since_kept += 1
            logger.log(
                level,
                "[resume] event not kept (%s): session=%s stream=%s; it cannot be replayed",
                exc or type(exc).__name__,
                self._session,
                stream_id,
            )
            return ""
        _losses.since_kept = 0
        return public_id(str(entry_id), tag)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the events of ``last_event_id``'s stream that came after it; the
        stream, which the GET being served is told (it may not be the GET stream)."""
        stream = await self._replay(last_event_id, send_callback)
        await report_resumed_stream(stream)
        return stream

    async def _replay(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_SECONDS):
                found = await events_after(self._redis, self._session, last_event_id)
        except (RedisError, OSError, TimeoutError, UnicodeDecodeError) as exc:
            # UnicodeDecodeError: an entry someone else wrote into the resume stream.
            logger.warning(
                "[resume] replay failed (%s): session=%s last_event_id=%s",
                exc or type(exc).__name__,
                self._session,
                shown(last_event_id, 64),
            )
            return None
        if found is None:
            if entry_of(last_event_id) is None:
                logger.warning(
                    "[resume] malformed Last-Event-ID %s from session=%s; nothing to replay",
                    shown(last_event_id, 64),
                    self._session,
                )
                return None
            # No longer kept (expired or trimmed): what came after it cannot be
            # told apart, but the client still gets a live GET stream rather
            # than an empty one it would reconnect to forever.
            logger.warning(
                "[resume] session=%s last_event_id=%s is no longer kept (or not its own); "
                "continuing its GET stream from now",
                self._session,
                shown(last_event_id, 64),
            )
            return GET_STREAM_KEY
        stream, events = found
        logger.info(
            "[resume] replay session=%s stream=%s after=%s events=%d",
            self._session,
            stream,
            shown(last_event_id, 64),
            len(events),
        )
        for event_id, message in events:
            await send_callback(EventMessage(message, event_id))
            await self._on_replayed(self._session, message)
        return stream


# Keeps one event in each of many sessions' resume streams, as ``store_event`` does
# (XADD, EXPIRE, SET owner), in one command: KEYS are (resume key, owner key) pairs;
# ARGV: stream field, stream id, message field, message, max length, ttl, replica,
# tag field, then one tag per session.
# A session whose XADD fails (its key holds something else) gets false (nil in the
# reply) and the others are kept: one bad key must not cost the whole fan-out.
_STORE_MANY = """
local ids = {}
for i = 1, #KEYS, 2 do
  local id = redis.pcall('XADD', KEYS[i], 'MAXLEN', '~', ARGV[5], '*',
                         ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[8], ARGV[8 + (i + 1) / 2])
  if type(id) == 'table' and id.err then
    ids[#ids + 1] = false
  else
    ids[#ids + 1] = id
    redis.call('EXPIRE', KEYS[i], ARGV[6])
    redis.call('SET', KEYS[i + 1], ARGV[7], 'EX', ARGV[6])
  end
end
return ids
"""
# Sessions per script call: bounds how long one call holds Redis.
_STORE_MANY_CHUNK = 500


async def store_events(
    events: list[tuple[EventStore, StreamId, JSONRPCMessage]],
) -> list[EventId | None]:
    """Keep many events at once (a fan-out): their ids, in order; ``""`` for one
    Redis did not keep (logged), None for one without a store.

    Events for :class:`RedisEventStore` s go to Redis in ONE submit per writer:
    a script call per same message (and stream, limits, replica) and up to
    :data:`_STORE_MANY_CHUNK` sessions, each session's entry made as
    ``store_event`` makes it, in the order given. Any other store is asked event
    by event. Never raises.
    """
    ids: list[EventId | None] = [None] * len(events)
    tags = [new_tag() for _ in events]
    by_writer: dict[int, dict[tuple[Any, ...], list[int]]] = {}
    others: list[int] = []
    for at, (store, stream_id, message) in enumerate(events):
        if isinstance(store, RedisEventStore):
            same = (str(stream_id), encode(message), store._max_events, store._ttl, store._replica)
            by_writer.setdefault(id(store._writer), {}).setdefault(same, []).append(at)
        else:
            others.append(at)

    async def keep_batch(groups: dict[tuple[Any, ...], list[int]]) -> None:
        calls: list[tuple[list[int], list[str]]] = []
        for (stream_id, data, max_events, ttl, replica), indexes in groups.items():
            argv = [contract.RESUME_STREAM_FIELD, stream_id, contract.RESUME_MESSAGE_FIELD, data]
            argv += [str(max_events), str(ttl), replica, contract.RESUME_TAG_FIELD]
            for first in range(0, len(indexes), _STORE_MANY_CHUNK):
                chunk = indexes[first : first + _STORE_MANY_CHUNK]
                keys = []
                for i in chunk:
                    session = cast(RedisEventStore, events[i][0])._session
                    keys += [contract.resume_key(session), contract.session_owner_key(session)]
                calls.append((chunk, keys + argv + [tags[i] for i in chunk]))

        def add(pipe: Any) -> int:
            for chunk, args in calls:
                pipe.eval(_STORE_MANY, 2 * len(chunk), *args)
            return len(calls)

        writer = cast(RedisEventStore, events[calls[0][0][0]][0])._writer
        try:
            # A fan-out's notifications wait for these ids: not behind a burst's writes
            # (the GET streams' own events; no queued write of theirs must come first).
            replies = await writer.submit(add, urgent=True)
        except (RedisError, OSError, TimeoutError) as exc:
            # The writer fails a submit as a whole: none of its entries can be told kept.
            indexes = [i for chunk, _ in calls for i in chunk]
            for i in indexes:
                ids[i] = ""
            logger.warning(
                "[resume] %d events not kept (%s), first session=%s stream=%s; "
                "they cannot be replayed",
                len(indexes),
                exc or type(exc).__name__,
                cast(RedisEventStore, events[indexes[0]][0])._session,
                events[indexes[0]][1],
            )
            return
        refused: list[int] = []
        for (chunk, _), kept in zip(calls, replies, strict=True):
            for i, entry_id in zip(chunk, kept, strict=True):
                if entry_id is None:
                    refused.append(i)
                    ids[i] = ""
                else:
                    entry = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    ids[i] = public_id(entry, tags[i])
        if refused:
            logger.warning(
                "[resume] %d events not kept (Redis refused the XADD), sessions=%s; "
                "they cannot be replayed",
                len(refused),
                ",".join(cast(RedisEventStore, events[i][0])._session for i in refused[:5]),
            )

    async def keep_one(at: int) -> None:
        store, stream_id, message = events[at]
        try:
            ids[at] = await store.store_event(stream_id, message)
        except Exception as exc:  # another store: must not stop the fan-out
            logger.warning("[resume] event not kept (%r): stream=%s", exc, stream_id)
            ids[at] = ""

    await asyncio.gather(
        *(keep_batch(groups) for groups in by_writer.values()), *(keep_one(i) for i in others)
    )
    return ids
