"""The relay: Redis pub/sub messages in, ``notifications/resources/updated`` out.

It listens on the updates channel and notifies the sessions of this process
that are subscribed to the message's URI (only the named session, when the
message names one). A bad payload is logged and ignored; a lost Redis
connection is logged and retried with backoff. Nothing stops the relay but
cancellation.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from services import contract, store
from services.eventlog import event
from services.evidence import Recorder
from services.sessions import SessionRegistry, Subscriber
from services.settings import LabSettings

logger = logging.getLogger("mcp_lab")

UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"
_MAX_BACKOFF_SECONDS = 5.0
_SHOWN_PAYLOAD_CHARS = 120


class Relay:
    """Turns each message on the updates channel into notifications."""

    def __init__(
        self, settings: LabSettings, redis: Redis, registry: SessionRegistry, recorder: Recorder
    ) -> None:
        self._settings = settings
        self._redis = redis
        self._registry = registry
        self._recorder = recorder
        self.state = "starting"
        self.subscribed = asyncio.Event()
        self.messages_relayed = 0
        self.messages_ignored = 0

    async def run(self) -> None:
        """Listen until cancelled, reconnecting after Redis errors."""
        channel = self._settings.updates_channel
        backoff = 0.2
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(channel)
                self.state = "subscribed"
                self.subscribed.set()
                logger.info("[relay] subscribed channel=%s", channel)
                backoff = 0.2
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        await self.handle(message["data"])
            except (RedisError, OSError) as exc:
                self.state = "disconnected"
                self.subscribed.clear()
                logger.warning("[relay] redis unavailable (%s); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
            finally:
                try:
                    await pubsub.aclose()
                except (RedisError, OSError):
                    pass

    async def handle(self, payload: bytes | str) -> None:
        """Relay one payload from the channel; never raises."""
        try:
            message = contract.parse_update_message(payload)
        except contract.BadMessage as exc:
            self.messages_ignored += 1
            shown = str(payload)[:_SHOWN_PAYLOAD_CHARS]
            logger.warning("[relay] ignored message: %s (payload=%r)", exc, shown)
            return
        targets = self._registry.subscribers(message.uri, message.session)
        if not targets:
            logger.info(
                "[relay] no subscribed session here for uri=%s session=%s",
                message.uri,
                message.session or "*",
            )
            return
        self.messages_relayed += 1
        for target in targets:
            await self._notify(target, message)

    async def _notify(self, target: Subscriber, message: contract.UpdateMessage) -> None:
        version = message.version
        if version is None:
            version = await self._current_version(target, message.uri)
        peer = target.peer
        event("resource/update", f"uri={message.uri} version={version}", peer)
        try:
            await target.send_updated(message.uri)
            await self._sent(target, UPDATED, message.uri, version)
            if self._settings.send_list_changed:
                await target.send_list_changed()
                await self._sent(target, LIST_CHANGED, None, None)
        except Exception:
            logger.exception("[relay] sending to session=%s failed", peer.session)

    async def _sent(
        self, target: Subscriber, method: str, uri: str | None, version: object
    ) -> None:
        peer = target.peer
        delivered = self._registry.can_deliver(target)
        detail = f"{method} uri={uri}" if uri else method
        extra = "" if delivered else "delivered=no (no open GET stream)"
        event("notification/send", detail, peer, extra)
        recorded_version = version if isinstance(version, int) else None
        await self._recorder.sent(peer, method, uri, recorded_version, delivered)

    async def _current_version(self, target: Subscriber, uri: str) -> int | str:
        scope = contract.scope_of(target.peer.session, self._settings.state_scope)
        try:
            version, _ = await store.read_state(
                self._redis, scope, uri, self._settings.initial_status
            )
        except (RedisError, OSError):
            return "?"
        return version
