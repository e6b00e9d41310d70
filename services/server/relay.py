"""The relay: Redis pub/sub messages in, ``notifications/resources/updated`` out.

It listens on the updates channel and notifies the sessions of this process
that are subscribed to the message's URI (only the named session, when the
message names one). A bad payload is logged and ignored; a lost Redis
connection (or any other error) is logged and the relay resubscribes with
backoff, so only cancellation stops it. Pub/sub keeps nothing for a
disconnected listener, so after each resubscribe the relay reconciles: every
subscriber here whose resource moved past the version it was last told about
is notified then.

The channel is read as bytes (the Redis client does not decode it), so a payload
that is not UTF-8, or is megabytes long, is one ignored message with one short
log line, not an error that drops the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from services import contract, logs, state
from services.catalog import Catalog
from services.evidence.recorder import Recorder
from services.logs import event
from services.reconnect import keep_running
from services.server.sessions import SessionRegistry, Subscriber
from services.settings import LabSettings

logger = logging.getLogger("mcp_lab.relay")

UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"
_SEND_TIMEOUT_SECONDS = 5.0
_SHOWN_PAYLOAD_CHARS = 120


class Relay:
    """Turns each message on the updates channel into notifications."""

    def __init__(
        self,
        settings: LabSettings,
        redis: Redis,
        registry: SessionRegistry,
        recorder: Recorder,
        catalog: Catalog,
    ) -> None:
        self._settings = settings
        self._catalog = catalog
        self._redis = redis
        self._registry = registry
        self._recorder = recorder
        # Pub/sub blocks on the socket between messages: no read timeout there.
        # Payloads stay bytes, so one that is not UTF-8 is a bad message, not an error.
        self._pubsub_redis = state.connect(
            settings.redis_url, socket_timeout=None, decode=False, reconnect=False
        )
        self.state = "starting"
        self.subscribed = asyncio.Event()
        self.messages_relayed = 0
        self.messages_ignored = 0
        self._listened_before = False

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
            self.state = "subscribed"
            self.subscribed.set()
            logger.info("[relay] subscribed channel=%s", channel)
            connected()
            if self._listened_before:
                await self.reconcile()
            self._listened_before = True
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    await self.handle(message["data"])
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    def _disconnected(self) -> None:
        self.state = "disconnected"
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
                    await self._notify(target, update)
        logger.info("[relay] reconcile checked=%d notified=%d", checked, notified)

    async def handle(self, payload: bytes | str) -> None:
        """Relay one payload from the channel; never raises."""
        try:
            message = contract.parse_update_message(payload, self._catalog)
        except contract.BadMessage as exc:
            self.messages_ignored += 1
            logger.warning(
                "[relay] ignored message: %s (payload=%s)",
                logs.shorten(str(exc)),
                logs.shown(payload, _SHOWN_PAYLOAD_CHARS),
            )
            return
        targets = [
            target
            for target in self._registry.subscribers(message.uri, message.session)
            if not self._already_told(target, message)
        ]
        if not targets:
            logger.info(
                "[relay] no subscribed session here for uri=%s session=%s",
                message.uri,
                logs.shorten(message.session or "*"),
            )
            return
        self.messages_relayed += 1
        # Concurrently, each bounded: one stuck client must not hold up the others.
        await asyncio.gather(*(self._notify(target, message) for target in targets))

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

    async def _notify(self, target: Subscriber, message: contract.UpdateMessage) -> None:
        version: int | str | None = message.version
        if version is None:
            version = await self._current_version(target, message.uri)
        event("resource/update", f"uri={message.uri} version={version}", target.peer)
        if isinstance(version, int):
            target.known[message.uri] = max(version, target.known.get(message.uri, 0))
        await self._send(target, UPDATED, message.uri, version, target.send_updated(message.uri))
        if self._settings.send_list_changed:
            await self._send(target, LIST_CHANGED, None, None, target.send_list_changed())

    async def _send(
        self,
        target: Subscriber,
        method: str,
        uri: str | None,
        version: object,
        sending: Awaitable[None],
    ) -> None:
        """Send one notification and record it: delivered only if a stream was open
        when it went out and the send completed."""
        peer = target.peer
        delivered = self._registry.can_deliver(target)
        problem = "" if delivered else "delivered=no (no open GET stream)"
        try:
            await asyncio.wait_for(sending, timeout=_SEND_TIMEOUT_SECONDS)
        except Exception as exc:
            delivered = False
            problem = f"delivered=no (send failed: {type(exc).__name__})"
            logger.warning("[relay] sending %s to session=%s failed: %r", method, peer.session, exc)
        detail = f"{method} uri={uri}" if uri else method
        event("notification/send", detail, peer, problem)
        recorded_version = version if isinstance(version, int) else None
        await self._recorder.sent(peer, method, uri, recorded_version, delivered)

    async def _current_version(self, target: Subscriber, uri: str) -> int | str:
        scope = contract.scope_of(target.peer.session, self._settings.state_scope)
        try:
            return await state.read_version(self._redis, scope, uri)
        except (RedisError, OSError):
            return "?"
