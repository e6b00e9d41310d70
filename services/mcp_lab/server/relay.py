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
records written together; see :mod:`mcp_lab.server.fanout` and docs/performance.md,
"Fan-out"). Other subscribers (legacy SSE, stdio, listen streams) are notified one
by one through their delivery paths (:mod:`mcp_lab.server.notify`,
:mod:`mcp_lab.server.delivery`). Each send is bounded, so one stuck client does not
hold up the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, logs, protocol, state
from mcp_lab.catalog import Catalog
from mcp_lab.evidence.recorder import Recorder
from mcp_lab.process.reconnect import keep_running
from mcp_lab.server.fair_queue import FairQueue
from mcp_lab.server.notify import Notifier
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.relay")

LIST_CHANGED = protocol.LIST_CHANGED
_SHOWN_PAYLOAD_CHARS = 120
# How many messages one look at the channel reads at most, and how many
# notifications may wait in the relay's queue (past it they wait on the channel).
_DRAIN_MESSAGES = 5_000
_MAX_QUEUED = 100_000
# How many sessions one round serves at most (one update each).
_ROUND_SESSIONS = 1_000


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
        self._notifier = Notifier(settings, redis, registry, recorder)
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
        # Called each time the relay has (re)subscribed, before it reconciles: the
        # lab's check for a Redis that came back without its data (server/restore.py).
        # An error there starts the relay over, so the check is made again.
        self.on_subscribed: Callable[[], Awaitable[None]] | None = None
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
            if self.on_subscribed is not None:
                await self.on_subscribed()
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

    async def tell(self, target: Subscriber, uri: str, version: int) -> None:
        """Notify ``target`` (here) that ``uri`` is at ``version``, as an update from the
        channel would: recorded, through its delivery path."""
        await self._notifier.notify_all(
            [(target, contract.UpdateMessage(uri, target.peer.session, version))]
        )

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
                    await self._notifier.notify_all([(target, update)])
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
            changed = target.delivery.list_changed()
            await self._notifier.send(target, LIST_CHANGED, None, None, changed)
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
            self._notifier.notify_all(updates), *(self._list_changed(message) for message in listed)
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
            *(
                self._notifier.send(t, LIST_CHANGED, None, None, t.delivery.list_changed())
                for t in listeners
            )
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

    async def _current_version(self, target: Subscriber, uri: str) -> int | str:
        scope = contract.scope_of(target.peer.session, self._settings.state_scope)
        return await self._notifier.read_version(scope, uri)
