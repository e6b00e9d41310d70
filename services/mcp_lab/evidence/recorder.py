"""The evidence record: every message in and every notification out, kept in Redis.

The record is the stream ``mcp:events`` (bounded, shared by all server replicas).
Observation runs are delimited by entries of ``mcp:runs``: a run covers the
events from its start to the next run's start. Recording never fails a request.

Events are written through the server's :class:`~mcp_lab.process.writer.BatchWriter`
(one pipeline per batch, a bounded queue), so a burst of requests waits for
its turn instead of failing for want of a Redis connection. An event that still
cannot be written (Redis down) is counted and logged, and as soon as Redis takes
writes again the count is added to ``mcp:events:lost`` (an entry per gap:
``count``, ``first_ms``, ``last_ms``, and ``sessions``: JSON, the count of each
session's lost events, for the sessions' rows), so the report can say how many
events its run is missing instead of silently scoring fewer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio
import mcp_types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, protocol, untrusted
from mcp_lab.contract import Peer
from mcp_lab.evidence import restarts
from mcp_lab.process.writer import BatchWriter

logger = logging.getLogger("mcp_lab.evidence")

# Requests whose response is a long-lived stream.
LONG_LIVED = frozenset({protocol.LISTEN})
# The event of a session the server ended (see ``Recorder.ended``).
SESSION_END = protocol.SESSION_END
_READ_PAGE = 1000

_LOST_MAX_ENTRIES = 10_000
# Sessions named in one entry of contract.EVENTS_LOST_STREAM at most (its "sessions").
_LOST_SESSIONS = 1000

# What a handler learnt while serving the current message (the resource version
# it read), picked up by the recording middleware when the handler returns.
_annotations: ContextVar[dict[str, Any] | None] = ContextVar("mcp_lab_annotations", default=None)


def annotate(**fields: Any) -> None:
    """Attach fields (``version=...``) to the event of the message being handled."""
    current = _annotations.get()
    if current is not None:
        current.update(fields)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """One notification sent, for :meth:`Recorder.sent_many`."""

    peer: Peer
    method: str
    uri: str | None
    version: int | None
    delivered: bool
    ts_ms: int
    due_ms: int | None = None  # when the lab promised it (see contract.Event)


class Recorder:
    """Writes events to Redis (through ``writer`` when given: batched)."""

    def __init__(self, redis: Redis, max_events: int, writer: BatchWriter | None = None) -> None:
        self._redis = redis
        self._max_events = max_events
        self._writer = writer or BatchWriter(redis)
        self.lost = 0
        # Lost events not yet counted in contract.EVENTS_LOST_STREAM: how many, and when.
        self._unsaved = 0
        self._unsaved_first_ms = 0
        self._unsaved_last_ms = 0
        # ... and whose: lost events by session (at most _LOST_SESSIONS sessions).
        self._unsaved_sessions: dict[str, int] = {}
        # A loss was logged since the last write that worked (see _loss_level).
        self._losing = False

    async def record(self, event: contract.Event) -> None:
        """Add one event; on a Redis error count it as lost and log it (never raises)."""
        fields = event.fields()

        def add(pipe: Any) -> int:
            pipe.xadd(contract.EVENTS_STREAM, fields, maxlen=self._max_events, approximate=True)
            return 1

        try:
            await self._writer.submit(add)
        except (RedisError, OSError) as exc:
            self._count_lost(event)
            logger.log(
                self._loss_level(exc),
                "[evidence] event not recorded (%s); %d lost so far: %s %s session=%s",
                exc,
                self.lost,
                event.direction,
                event.method,
                event.session,
            )
            return
        self._losing = False
        if self._unsaved:
            await self.save_lost()

    async def record_many(self, events: list[contract.Event]) -> None:
        """Add several events in one pipeline (a fan-out's records), in order; on a
        Redis error count each as lost and log once (never raises)."""
        if not events:
            return
        all_fields = [event.fields() for event in events]

        def add(pipe: Any) -> int:
            for fields in all_fields:
                pipe.xadd(contract.EVENTS_STREAM, fields, maxlen=self._max_events, approximate=True)
            return len(all_fields)

        try:
            await self._writer.submit(add)
        except (RedisError, OSError) as exc:
            for event in events:
                self._count_lost(event)
            logger.log(
                self._loss_level(exc),
                "[evidence] %d events not recorded (%s); %d lost so far: %s %s, first session=%s",
                len(events),
                exc,
                self.lost,
                events[0].direction,
                events[0].method,
                events[0].session,
            )
            return
        self._losing = False
        if self._unsaved:
            await self.save_lost()

    def _loss_level(self, _: Exception) -> int:
        """The level of a lost event's line: WARNING for the first loss after a write
        that worked, DEBUG for the rest of that run of losses (an outage is not a
        line per request; the server's probe logs its start and end). Each one is
        counted all the same."""
        if self._losing:
            return logging.DEBUG
        self._losing = True
        return logging.WARNING

    def _count_lost(self, event: contract.Event) -> None:
        self.lost += 1
        if not self._unsaved:
            self._unsaved_first_ms = event.ts_ms
        self._unsaved += 1
        self._unsaved_first_ms = min(self._unsaved_first_ms, event.ts_ms)
        self._unsaved_last_ms = max(self._unsaved_last_ms, event.ts_ms)
        session = event.session
        if session and (
            session in self._unsaved_sessions or len(self._unsaved_sessions) < _LOST_SESSIONS
        ):
            self._unsaved_sessions[session] = self._unsaved_sessions.get(session, 0) + 1

    @property
    def unsaved_lost(self) -> int:
        """Lost events not yet counted in Redis (Redis has not taken a write since)."""
        return self._unsaved

    async def save_lost(self) -> bool:
        """Add the count of lost events to ``mcp:events:lost``; True when nothing is left
        unsaved. Called after each recorded event, and on shutdown."""
        count, first, last = self._unsaved, self._unsaved_first_ms, self._unsaved_last_ms
        if not count:
            return True
        sessions, self._unsaved_sessions = self._unsaved_sessions, {}
        self._unsaved = 0  # a concurrent record() must not save the same gap twice
        entry: dict[Any, Any] = {"count": count, "first_ms": first, "last_ms": last}
        if sessions:
            entry["sessions"] = json.dumps(sessions, separators=(",", ":"))
        try:
            await self._redis.xadd(
                contract.EVENTS_LOST_STREAM, entry, maxlen=_LOST_MAX_ENTRIES, approximate=True
            )
        except (RedisError, OSError) as exc:
            self._unsaved += count
            self._unsaved_first_ms = min(self._unsaved_first_ms or first, first)
            self._unsaved_last_ms = max(self._unsaved_last_ms, last)
            for session, lost in sessions.items():
                self._unsaved_sessions[session] = self._unsaved_sessions.get(session, 0) + lost
            logger.warning(
                "[evidence] could not save the count of %d lost event(s): %s", count, exc
            )
            return False
        logger.warning(
            "[evidence] %d event(s) between %d and %d ms were not recorded; counted in %s",
            count,
            first,
            last,
            contract.EVENTS_LOST_STREAM,
        )
        return True

    async def sent(
        self,
        peer: Peer,
        method: str,
        uri: str | None,
        version: int | None,
        delivered: bool,
        due_ms: int | None = None,
    ) -> None:
        """Record a notification sent to ``peer`` (due at ``due_ms``, when promised)."""
        await self.record(
            _event(peer, "out", method, now_ms(), uri, version, delivered=delivered, due_ms=due_ms)
        )

    async def sent_many(self, sent: list[Sent]) -> None:
        """Record several notifications at once (one publish to many sessions)."""
        await self.record_many(
            [
                _event(
                    s.peer,
                    "out",
                    s.method,
                    s.ts_ms,
                    s.uri,
                    s.version,
                    delivered=s.delivered,
                    due_ms=s.due_ms,
                )
                for s in sent
            ]
        )

    async def resumed(self, peer: Peer, method: str, uri: str | None) -> None:
        """Record a notification written to a stream the client resumed (``Last-Event-ID``)."""
        await self.record(
            _event(peer, "out", method, now_ms(), uri, None, delivered=True, resumed=True)
        )

    async def stream(self, peer: Peer, direction: str, method: str) -> None:
        """Record what happened to a GET stream of ``peer``: opened, resumed or closed
        (``in``), or an event without data written on it (``out``, ``stream/priming``)."""
        await self.record(_event(peer, direction, method, now_ms(), None, None))

    async def lab_did(self, peer: Peer, method: str, uri: str | None = None) -> None:
        """Record something the lab did to ``peer`` that is no message (``out``): a
        listen stream it dropped, a URI its acknowledgement left out."""
        await self.record(_event(peer, "out", method, now_ms(), uri, None))

    async def ended(
        self, peer: Peer, reason: str, uri: str | None = None, version: int | None = None
    ) -> None:
        """Record that ``peer``'s session ended without the client, and why (``idle``,
        ``replica-gone``); with the version of ``uri`` its state had then."""
        event = _event(peer, "out", SESSION_END, now_ms(), uri, version)
        await self.record(dataclasses.replace(event, reason=reason))

    async def restored(self, held: list[tuple[Peer, str, int]], ts_ms: int) -> None:
        """Record each subscription the server wrote again into a Redis that came back
        without its data (``held``: its peer, URI and the version it was told of), one
        ``subscription/restored`` each, all at ``ts_ms``."""
        await self.record_many(
            [
                _event(peer, "out", restarts.RESTORED, ts_ms, uri, version)
                for peer, uri, version in held
            ]
        )

    def middleware(
        self, peer_of: Callable[[ServerRequestContext[Any], Any], Peer]
    ) -> ServerMiddleware[Any]:
        """A low-level server middleware recording every inbound message."""

        async def record_inbound(
            ctx: ServerRequestContext[Any], call_next: CallNext
        ) -> HandlerResult:
            received = now_ms()
            params = ctx.params if isinstance(ctx.params, dict) else {}
            if ctx.method in LONG_LIVED:
                # Recorded on arrival: the request lasts as long as its stream.
                await self.record(_inbound(peer_of(ctx, None), ctx.method, received, params))
                return await call_next(ctx)
            notes: dict[str, Any] = {}
            token = _annotations.set(notes)
            error: int | None = None
            try:
                return await call_next(ctx)
            except MCPError as exc:
                error = exc.error.code
                raise
            except ValidationError:
                error = mcp_types.INVALID_PARAMS
                raise
            except Exception:
                error = mcp_types.INTERNAL_ERROR
                raise
            finally:
                _annotations.reset(token)
                peer = peer_of(ctx, params.get("clientInfo"))
                inbound = _inbound(peer, ctx.method, received, params, notes.get("version"), error)
                if notes.get("reason"):
                    inbound = dataclasses.replace(inbound, reason=notes["reason"])
                with anyio.CancelScope(shield=True):  # a cancelled request is still evidence
                    await self.record(inbound)

        return record_inbound


def _uri_of(method: str, params: dict[str, Any]) -> str | None:
    """The resource a message is about: ``params.uri``, or the first URI a listen names."""
    if method == protocol.LISTEN:
        wanted = (params.get("notifications") or {}).get("resourceSubscriptions") or []
        return wanted[0] if wanted and isinstance(wanted[0], str) else None
    uri = params.get("uri")
    return uri if isinstance(uri, str) else None


def _inbound(
    peer: Peer,
    method: str,
    received: int,
    params: dict[str, Any],
    version: int | None = None,
    error: int | None = None,
) -> contract.Event:
    return _event(peer, "in", method, received, _uri_of(method, params), version, error=error)


def _event(
    peer: Peer,
    direction: str,
    method: str,
    ts_ms: int,
    uri: str | None,
    version: int | None,
    *,
    delivered: bool | None = None,
    error: int | None = None,
    resumed: bool = False,
    due_ms: int | None = None,
) -> contract.Event:
    # The method and URI may be a client's own (an unknown method, an unknown URI):
    # the record keeps them cut (services/mcp_lab/untrusted.py); the peer's are cut already.
    return contract.Event(
        ts_ms=ts_ms,
        session=peer.session,
        client=peer.client_name,
        client_version=peer.client_version,
        protocol=peer.protocol,
        transport=peer.transport,
        direction=direction,
        method=untrusted.cut(method, untrusted.METHOD_CHARS),
        uri=None if uri is None else untrusted.cut(uri, untrusted.URI_CHARS),
        version=version,
        delivered=delivered,
        error=error,
        resumed=resumed,
        due_ms=due_ms,
    )
