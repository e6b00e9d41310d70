"""The relay: Redis pub/sub messages in, ``notifications/resources/updated`` out.

It listens on the updates channel and notifies the sessions of this process
that are subscribed to the message's URI (only the named session, when the
message names one). A message saying a scenario listed a new resource sends
``notifications/resources/list_changed`` instead, to every session here that hears
it (in the message's session, or all of them). A bad payload is logged and ignored; a lost Redis
connection (or any other error) is logged and the relay resubscribes with
backoff, so only cancellation stops it. Pub/sub keeps nothing for a
disconnected listener, so after each resubscribe the relay reconciles: every
subscriber here whose resource moved past the version it was last told about
is notified then.

The channel is read as bytes (the Redis client does not decode it), so a payload
that is not UTF-8, or is megabytes long, is one ignored message with one short
log line, not an error that drops the subscription.

Delivery is fair between sessions: every message waiting on the channel is read
at once and queued for the session it is for (a message for every subscriber
here, for each of them), and each round takes one update of each session in turn
(:mod:`mcp_lab.server.fair_queue`). A session with thousands of updates due
does not push another session's one update back: that one goes out in the next
round.

One round is one fan-out: the versions not named are read once per state scope
and URI, and the Streamable HTTP sessions' GET streams are written to together
(each notification built once, the resume events stored together, the evidence
records written together; see ``Relay._fan_out`` and docs/performance.md,
"Fan-out"). Other subscribers (legacy SSE, stdio, listen streams) are notified
through their own senders. Each send is bounded, so one stuck client does not
hold up the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

import anyio
import mcp_types
from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage, EventStore
from mcp_types import JSONRPCMessage
from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, logs, protocol, state
from mcp_lab.catalog import Catalog
from mcp_lab.contract import Peer
from mcp_lab.evidence.recorder import Recorder, Sent, now_ms
from mcp_lab.logs import event, events
from mcp_lab.process import heap
from mcp_lab.process.reconnect import keep_running
from mcp_lab.server import mcp_adapter
from mcp_lab.server.fair_queue import FairQueue
from mcp_lab.server.mcp_adapter import PreparedNotification
from mcp_lab.server.resume.eventstore import store_events
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.relay")

UPDATED, LIST_CHANGED = protocol.UPDATED, protocol.LIST_CHANGED
_SEND_TIMEOUT_SECONDS = 5.0
_SHOWN_PAYLOAD_CHARS = 120
# How many messages one look at the channel reads at most, and how many
# notifications may wait in the relay's queue (past it they wait on the channel).
_DRAIN_MESSAGES = 5_000
_MAX_QUEUED = 100_000
# How many sessions one round serves at most (one update each).
_ROUND_SESSIONS = 1_000
_NO_STREAM = "delivered=no (no open GET stream)"
# Event loop rounds a fan-out yields for the GET streams' writers before its
# bookkeeping (measured: enough for 1,000 sessions' notifications to reach the socket).
_WRITER_ROUNDS = 12


async def _let_writers_run() -> None:
    """Yield to the event loop for a few rounds, so that the GET streams' writers
    woken by a fan-out's puts write the notifications before the fan-out's own
    bookkeeping (evidence records, log lines) takes the CPU: each round lets every
    ready task take one step, and a notification's way from the queue to the
    socket is a handful of steps (the SDK's stream writer, sse-starlette, the ASGI
    send chain). Bounded: the bookkeeping waits at most these rounds."""
    for _ in range(_WRITER_ROUNDS):
        await asyncio.sleep(0)


def _failed(exc: BaseException) -> str:
    return f"delivered=no (send failed: {type(exc).__name__})"


def _log(outcomes: list[_Outcome]) -> None:
    """The log lines of sent notifications, in the order they were put."""
    lines: list[tuple[str, str, Peer, str]] = []
    for o in outcomes:
        peer = o.target.peer
        if o.method == UPDATED:
            lines.append(("resource/update", f"uri={o.uri} version={o.version}", peer, ""))
            lines.append(("notification/send", f"{UPDATED} uri={o.uri}", peer, o.problem))
        else:
            lines.append(("notification/send", o.method, peer, o.problem))
    events(lines)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One notification sent (or not), to log and record."""

    target: Subscriber
    method: str
    uri: str
    version: int | str | None
    delivered: bool
    problem: str
    ts_ms: int
    due_ms: int | None

    def sent(self) -> Sent:
        uri = self.uri if self.method == UPDATED else None
        version = self.version if isinstance(self.version, int) and uri else None
        due = self.due_ms if uri else None
        return Sent(self.target.peer, self.method, uri, version, self.delivered, self.ts_ms, due)


@dataclass(frozen=True, slots=True)
class _Target:
    """One subscriber of an update: the URI, the version to tell it, when it was due."""

    target: Subscriber
    uri: str
    version: int | str | None
    due_ms: int | None


# A subscriber with the update it is to hear of.
_Update = tuple[Subscriber, contract.UpdateMessage]


@dataclass(frozen=True, slots=True)
class _Pending:
    """One event of a fan-out, on its way to a session's GET stream."""

    target: Subscriber
    uri: str
    method: str
    version: int | str | None
    event: EventMessage
    due_ms: int | None

    def outcome(self, delivered: bool, problem: str) -> _Outcome:
        return _Outcome(
            self.target,
            self.method,
            self.uri,
            self.version,
            delivered,
            problem,
            now_ms(),
            self.due_ms,
        )


class RelayState(StrEnum):
    """Where the relay's pub/sub stands (``/healthz`` and the ready line show the value)."""

    STARTING = "starting"
    SUBSCRIBED = "subscribed"  # listening on the updates channel: notifications flow
    DISCONNECTED = "disconnected"  # Redis lost; it reconnects, then reconciles


class Relay:
    """Turns each message on the updates channel into notifications."""

    def __init__(
        self,
        settings: LabSettings,
        redis: Redis,
        registry: SessionRegistry,
        recorder: Recorder,
        catalog: Catalog,
        replica: str = "",
    ) -> None:
        self._settings = settings
        # Listened on besides the updates channel, so that other replicas can tell at
        # once that this process is gone (contract.replica_channel).
        self._replica_channel = contract.replica_channel(replica) if replica else None
        self._catalog = catalog
        self._redis = redis
        self._registry = registry
        self._recorder = recorder
        # Pub/sub blocks on the socket between messages: no read timeout there.
        # Payloads stay bytes, so one that is not UTF-8 is a bad message, not an error.
        self._pubsub_redis = state.connect(
            settings.redis_url, socket_timeout=None, decode=False, reconnect=False
        )
        self.state = RelayState.STARTING
        self.subscribed = asyncio.Event()
        self.messages_relayed = 0
        self.messages_ignored = 0
        self._listened_before = False
        # The messages read from the channel and not relayed yet, per session.
        self._queue: FairQueue[contract.UpdateMessage] = FairQueue()

    async def run(self) -> None:
        """Listen until cancelled, reconnecting after any error (Redis or not)."""
        await keep_running(
            self._listen,
            logger=logger,
            tag="relay",
            max_pause_seconds=self._settings.reconnect_backoff_max_seconds,
            on_error=self._disconnected,
        )

    async def _listen(self, connected: Callable[[], None]) -> None:
        """Subscribe and relay each message; reconcile first after a gap."""
        channel = self._settings.updates_channel
        pubsub = self._pubsub_redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(channel)
            if self._replica_channel is not None:
                await pubsub.subscribe(self._replica_channel)
            self.state = RelayState.SUBSCRIBED
            self.subscribed.set()
            logger.info("[relay] subscribed channel=%s", channel)
            connected()
            if self._listened_before:
                await self.reconcile()
            self._listened_before = True
            wanted = channel.encode()
            while True:
                # Everything that arrived meanwhile is queued, then one round goes out:
                # what arrives during a round joins the queue before the next one.
                if not self._queue:
                    self._take_message(await pubsub.get_message(timeout=None), wanted)
                for _ in range(_DRAIN_MESSAGES):
                    if len(self._queue) >= _MAX_QUEUED:
                        break
                    more = await pubsub.get_message(timeout=0.0)
                    if more is None:
                        break
                    self._take_message(more, wanted)
                await self._serve_round()
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    def _take_message(self, message: dict[str, Any] | None, wanted: bytes) -> None:
        if message is not None and message.get("type") == "message":
            if message.get("channel") == wanted:
                self._take(message["data"])

    def _disconnected(self) -> None:
        self.state = RelayState.DISCONNECTED
        self.subscribed.clear()

    async def close(self) -> None:
        """Release the relay's own Redis connection."""
        await self._pubsub_redis.aclose()

    async def reconcile(self) -> None:
        """After a gap in the subscription, notify every subscriber here whose
        resource moved past the version it was last told about: an update
        published while the relay could not hear it is delivered late, not lost."""
        checked = notified = 0
        for target in self._registry.all_subscribers():
            for uri in sorted(target.uris):
                checked += 1
                current = await self._current_version(target, uri)
                if not isinstance(current, int):
                    # Not skipped: the relay starts over, and reconciles again.
                    raise RedisError(
                        f"reconcile could not read uri={uri} session={target.peer.session}"
                    )
                if current > target.known.get(uri, 0):
                    notified += 1
                    logger.info(
                        "[relay] reconciled uri=%s version=%d session=%s (missed while deaf)",
                        uri,
                        current,
                        target.peer.session,
                    )
                    update = contract.UpdateMessage(uri, target.peer.session, current)
                    await self._notify_all([(target, update)])
        relisted = await self._reconcile_listed()
        logger.info(
            "[relay] reconcile checked=%d notified=%d list_changed=%d", checked, notified, relisted
        )

    async def _reconcile_listed(self) -> int:
        """After a gap, send list_changed to every listener here in whose scope a
        scenario listed a resource it was not told of (read once per scope); how
        many were sent."""
        followed = [t for t in self._registry.list_listeners() if t.told_listed is not None]
        scopes = {contract.scope_of(t.peer.session, self._settings.state_scope) for t in followed}
        listed = {scope: await state.listed(self._redis, scope) for scope in sorted(scopes)}
        sent = 0
        for target in followed:
            told = cast(set[str], target.told_listed)
            new = listed[contract.scope_of(target.peer.session, self._settings.state_scope)] - told
            if not new:
                continue
            told |= new
            logger.info(
                "[relay] reconciled list_changed uri=%s session=%s (missed while deaf)",
                logs.shorten(",".join(sorted(new))),
                logs.shorten(target.peer.session),
            )
            await self._send(target, LIST_CHANGED, None, None, target.send_list_changed())
            sent += 1
        return sent

    async def handle(self, payload: bytes | str) -> None:
        """Relay one payload from the channel; never raises."""
        await self.handle_many([payload])

    async def handle_many(self, payloads: list[bytes | str]) -> None:
        """Relay payloads that arrived together: queue them, then serve rounds until
        none is left. Never raises for a bad payload: it is logged and skipped."""
        for payload in payloads:
            self._take(payload)
        while self._queue:
            await self._serve_round()

    def _take(self, payload: bytes | str) -> None:
        """Queue one payload's messages, each for the session it is for (a message
        for every subscriber here: one for each of their sessions); a bad payload
        is logged and counted."""
        try:
            messages = contract.parse_update_messages(payload, self._catalog)
        except contract.BadMessage as exc:
            self.messages_ignored += 1
            logger.warning(
                "[relay] ignored message: %s (payload=%s)",
                logs.shorten(str(exc)),
                logs.shown(payload, _SHOWN_PAYLOAD_CHARS),
            )
            return
        queued = [m for message in messages for m in self._for_sessions_here(message)]
        if queued:
            self.messages_relayed += 1
        elif messages[0].kind != contract.LISTED_KIND:
            self._log_nobody(messages)
        for message in queued:
            self._queue.put(cast(str, message.session), message)

    def _for_sessions_here(self, message: contract.UpdateMessage) -> list[contract.UpdateMessage]:
        """``message`` for each session here it is for: itself when it names one held
        here, else one copy per session here that hears it."""
        if message.kind == contract.LISTED_KIND:
            listeners = self._registry.list_listeners(message.session)
            sessions = list(dict.fromkeys(t.peer.session for t in listeners))
            if not sessions:
                logger.info(
                    "[relay] listed uri=%s session=%s: list_changed to 0 listener(s)",
                    message.uri,
                    logs.shorten(message.session or "*"),
                )
        else:
            held = self._registry.subscribers(message.uri, message.session)
            sessions = list(dict.fromkeys(t.peer.session for t in held))
        if message.session is not None:
            return [message] if sessions else []
        return [dataclasses.replace(message, session=session) for session in sessions]

    @staticmethod
    def _log_nobody(messages: list[contract.UpdateMessage]) -> None:
        first = messages[0]
        if len(messages) == 1:
            logger.info(
                "[relay] no subscribed session here for uri=%s session=%s",
                first.uri,
                logs.shorten(first.session or "*"),
            )
        else:
            logger.info(
                "[relay] none of the %d sessions of a batch is here (uri=%s)",
                len(messages),
                first.uri,
            )

    async def _serve_round(self) -> None:
        """Relay one queued message of each session in turn (at most
        ``_ROUND_SESSIONS``): the updates in one fan-out, list_changed beside them."""
        messages = self._queue.round(_ROUND_SESSIONS)
        listed = [m for m in messages if m.kind == contract.LISTED_KIND]
        updates = [
            (target, message)
            for message in messages
            if message.kind != contract.LISTED_KIND
            for target in self._registry.subscribers(message.uri, message.session)
            if not self._already_told(target, message)
        ]
        await asyncio.gather(
            self._notify_all(updates), *(self._list_changed(message) for message in listed)
        )

    async def _list_changed(self, message: contract.UpdateMessage) -> None:
        """A scenario listed a new resource: ``list_changed`` to whoever hears it in
        the message's scope (one session, or everyone here in shared scope)."""
        listeners = self._registry.list_listeners(message.session)
        logger.info(
            "[relay] listed uri=%s session=%s: list_changed to %d listener(s)",
            message.uri,
            logs.shorten(message.session or "*"),
            len(listeners),
        )
        if listeners:
            self.messages_relayed += 1
        for listener in listeners:
            if listener.told_listed is not None:
                listener.told_listed.add(message.uri)
        await asyncio.gather(
            *(self._send(t, LIST_CHANGED, None, None, t.send_list_changed()) for t in listeners)
        )

    @staticmethod
    def _already_told(target: Subscriber, message: contract.UpdateMessage) -> bool:
        """Whether ``target`` was notified of this version already (by a reconcile
        that read it before its message arrived). A message without a version (a
        hand-made publish) always notifies."""
        version = message.version
        if version is None or target.known.get(message.uri, 0) < version:
            return False
        logger.info(
            "[relay] already notified uri=%s version=%d session=%s",
            message.uri,
            version,
            target.peer.session,
        )
        return True

    async def _notify_all(self, targets: list[_Update]) -> None:
        """Notify each target of its update (of one URI or of many): the versions not
        named read once per state scope and URI (not per session), the Streamable HTTP
        sessions' GET streams written to together (:meth:`_fan_out`), every other
        subscriber through its own sender. Concurrently, each bounded: one stuck
        client must not hold up the others."""
        if not targets:
            return
        versions = await self._versions(targets)
        direct: list[_Target] = []
        others: list[_Target] = []
        for (target, message), version in zip(targets, versions, strict=True):
            uri = message.uri
            if isinstance(version, int):
                target.known[uri] = max(version, target.known.get(uri, 0))
            stream = target.get_stream
            one = _Target(target, uri, version, message.due_ms)
            (direct if stream is not None and stream.usable else others).append(one)
        await asyncio.gather(self._fan_out(direct), *(self._notify(one) for one in others))

    async def _versions(self, targets: list[_Update]) -> list[int | str | None]:
        """Per target, the version to tell: its message's, else the current one of
        its state scope, read once per scope and URI (``"?"`` if Redis could not say)."""
        scope_of = self._settings.state_scope

        def where(target: Subscriber, message: contract.UpdateMessage) -> tuple[str, str]:
            return contract.scope_of(target.peer.session, scope_of), message.uri

        unnamed = list(dict.fromkeys(where(t, m) for t, m in targets if m.version is None))
        read = await asyncio.gather(*(self._read_version(scope, uri) for scope, uri in unnamed))
        current = dict(zip(unnamed, read, strict=True))
        return [m.version if m.version is not None else current[where(t, m)] for t, m in targets]

    def _prepared(self, uri: str) -> list[tuple[str, PreparedNotification]]:
        """The notifications of one update, as the SDK would build them, built once."""
        updated = mcp_types.ResourceUpdatedNotification(
            params=mcp_types.ResourceUpdatedNotificationParams(uri=uri)
        )
        prepared = [(UPDATED, mcp_adapter.prepared_notification(updated))]
        if self._settings.send_list_changed:
            changed = mcp_types.ResourceListChangedNotification()
            prepared.append((LIST_CHANGED, mcp_adapter.prepared_notification(changed)))
        return prepared

    async def _fan_out(self, targets: list[_Target]) -> None:
        """Notify Streamable HTTP sessions by writing to their GET streams directly,
        as the SDK's message router would: each URI's notification built and
        serialised once; every session's event stored for resumption (together, see
        :func:`store_events`; each gets its own event id), then put on the session's
        GET stream queue if one is open. A queue that is full (a client not
        reading) gets a bounded wait of its own; the rest are recorded at once.
        Delivered: the lab saw the GET stream open and the put succeeded."""
        if not targets:
            return
        prepared = {uri: self._prepared(uri) for uri in dict.fromkeys(t.uri for t in targets)}
        entries: list[tuple[EventStore, str, JSONRPCMessage]] = []
        for one in targets:
            store = cast(mcp_adapter.GetStream, one.target.get_stream).event_store
            if store is not None:
                entries += [(store, GET_STREAM_KEY, message) for _, message in prepared[one.uri]]
        ids = iter(await self._store(entries))
        outcomes: list[_Outcome] = []
        blocked: list[tuple[_Pending, list[_Pending]]] = []
        # The puts and the writers' rounds allocate in a burst; a collection then
        # would hold up every notification (services/mcp_lab/process/heap.py). Bounded: no I/O here.
        with heap.collection_deferred():
            self._put_all(targets, prepared, ids, outcomes, blocked)
            # Logged before anything else runs: a client's re-read prompted by the
            # notification must not reach the log before the notification does.
            _log(outcomes)
            try:
                if outcomes:
                    await _let_writers_run()
            finally:
                # Cancelled (shutdown) right after the puts, the notifications are
                # on their way: their records are still written (the writer is
                # flushed after the relay stops).
                await self._record(outcomes)
        if blocked:
            late = await asyncio.gather(*(self._push(first, rest) for first, rest in blocked))
            await self._record([outcome for some in late for outcome in some])

    def _put_all(
        self,
        targets: list[_Target],
        prepared: dict[str, list[tuple[str, PreparedNotification]]],
        ids: Iterator[str | None],
        outcomes: list[_Outcome],
        blocked: list[tuple[_Pending, list[_Pending]]],
    ) -> None:
        """Put each target's events on its GET stream queue, without waiting: an
        outcome for each, or (a full queue) the events left for :meth:`_push`."""
        for one in targets:
            stream = cast(mcp_adapter.GetStream, one.target.get_stream)
            kept = stream.event_store is not None
            queue = stream.queue()
            can_deliver = self._registry.can_deliver(one.target)
            pending = []
            for method, message in prepared[one.uri]:
                event = EventMessage(message, next(ids) if kept else None)
                pending.append(
                    _Pending(one.target, one.uri, method, one.version, event, one.due_ms)
                )
            for at, item in enumerate(pending):
                if queue is None:  # the SDK would store it and drop it, as here
                    outcomes.append(item.outcome(False, _NO_STREAM))
                    continue
                try:
                    queue.send_nowait(item.event)
                except anyio.WouldBlock:
                    blocked.append((item, pending[at + 1 :]))
                    break
                except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    outcomes.append(item.outcome(False, _failed(exc)))
                else:
                    problem = "" if can_deliver else _NO_STREAM
                    outcomes.append(item.outcome(can_deliver, problem))

    async def _store(
        self, entries: list[tuple[EventStore, str, JSONRPCMessage]]
    ) -> list[str | None]:
        """Store the fan-out's events for resumption. No timeout of its own, as for
        the SDK's ``store_event``: the batch writer bounds each round trip, and on a
        Redis that fails the events go out without ids (logged by the store). A
        timeout here could not take back a write still queued, whose event would
        then be replayed with an id the client never saw."""
        if not entries:
            return []
        return await store_events(entries)

    async def _push(self, first: _Pending, rest: list[_Pending]) -> list[_Outcome]:
        """Put events on a GET stream whose queue is full, each send bounded and
        logged as soon as it is done (no event-loop turn between)."""
        outcomes = []
        for item in [first, *rest]:
            outcome = await self._push_one(item)
            _log([outcome])
            outcomes.append(outcome)
        return outcomes

    async def _push_one(self, item: _Pending) -> _Outcome:
        queue = cast(mcp_adapter.GetStream, item.target.get_stream).queue()
        if queue is None:
            return item.outcome(False, _NO_STREAM)
        try:
            async with asyncio.timeout(_SEND_TIMEOUT_SECONDS):
                await queue.send(item.event)
        except Exception as exc:
            logger.warning(
                "[relay] sending %s to session=%s failed: %r",
                item.method,
                item.target.peer.session,
                exc,
            )
            return item.outcome(False, _failed(exc))
        delivered = self._registry.can_deliver(item.target)
        return item.outcome(delivered, "" if delivered else _NO_STREAM)

    async def _record(self, outcomes: list[_Outcome]) -> None:
        """The evidence records of sent notifications, in one batch: while they are
        written, the GET streams' writers put the notifications on the wire."""
        if outcomes:
            await self._recorder.sent_many([o.sent() for o in outcomes])

    async def _notify(self, one: _Target) -> None:
        """Notify one subscriber through its own sender (SSE, stdio, listen streams)."""
        target, version, uri = one.target, one.version, one.uri
        event("resource/update", f"uri={uri} version={version}", target.peer)
        await self._send(target, UPDATED, uri, version, target.send_updated(uri), one.due_ms)
        if self._settings.send_list_changed:
            await self._send(target, LIST_CHANGED, None, None, target.send_list_changed())

    async def _send(
        self,
        target: Subscriber,
        method: str,
        uri: str | None,
        version: object,
        sending: Awaitable[None],
        due_ms: int | None = None,
    ) -> None:
        """Send one notification and record it: delivered only if a stream was open
        when it went out and the send completed."""
        peer = target.peer
        delivered = self._registry.can_deliver(target)
        problem = "" if delivered else _NO_STREAM
        try:
            # Awaited here, not in a task of its own (as wait_for would): the line
            # below is logged before the client could answer the notification.
            async with asyncio.timeout(_SEND_TIMEOUT_SECONDS):
                await sending
        except Exception as exc:
            delivered = False
            problem = _failed(exc)
            logger.warning("[relay] sending %s to session=%s failed: %r", method, peer.session, exc)
        detail = f"{method} uri={uri}" if uri else method
        event("notification/send", detail, peer, problem)
        recorded_version = version if isinstance(version, int) else None
        await self._recorder.sent(peer, method, uri, recorded_version, delivered, due_ms)

    async def _current_version(self, target: Subscriber, uri: str) -> int | str:
        scope = contract.scope_of(target.peer.session, self._settings.state_scope)
        return await self._read_version(scope, uri)

    async def _read_version(self, scope: str, uri: str) -> int | str:
        try:
            return await state.read_version(self._redis, scope, uri)
        except (RedisError, OSError):
            return "?"
