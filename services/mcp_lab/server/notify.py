"""Telling subscribers of their updates, for the relay (:mod:`mcp_lab.server.relay`
decides who is told of what): the version each is told (its message's, else the
current one, read once per state scope and URI rather than once per session), then,
as each subscriber's delivery (:mod:`mcp_lab.server.delivery`) says, the batched
ones (Streamable HTTP sessions with a usable GET stream) written to together
(:mod:`mcp_lab.server.fanout`) and every other one (legacy SSE, stdio, listen
streams, sessions the SDK's senders serve) through its delivery, one by one. Each
send is bounded, so one stuck client does not hold up the others, and each is logged
and recorded as evidence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import contract, protocol, state
from mcp_lab.evidence.recorder import Recorder
from mcp_lab.logs import event
from mcp_lab.server.fanout import NO_STREAM, SEND_TIMEOUT_SECONDS, FanOut, Target, failed
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.relay")

UPDATED, LIST_CHANGED = protocol.UPDATED, protocol.LIST_CHANGED

# A subscriber with the update it is to hear of.
Update = tuple[Subscriber, contract.UpdateMessage]


class Notifier:
    """Sends the relay's notifications to the subscribers of this process."""

    def __init__(
        self,
        settings: LabSettings,
        redis: Redis,
        registry: SessionRegistry,
        recorder: Recorder,
    ) -> None:
        self._settings = settings
        self._redis = redis
        self._registry = registry
        self._recorder = recorder
        self._fanout = FanOut(settings, registry, recorder)

    async def notify_all(self, targets: list[Update]) -> None:
        """Notify each target of its update (of one URI or of many): the versions not
        named read once per state scope and URI (not per session), the targets whose
        delivery is batched written to together (:meth:`FanOut.fan_out`), every other
        one through its delivery. Concurrently, each bounded: one stuck client must
        not hold up the others."""
        if not targets:
            return
        versions = await self._versions(targets)
        direct: list[Target] = []
        others: list[Target] = []
        for (target, message), version in zip(targets, versions, strict=True):
            uri = message.uri
            if isinstance(version, int):
                target.known[uri] = max(version, target.known.get(uri, 0))
            one = Target(target, uri, version, message.due_ms)
            (direct if target.delivery.batched else others).append(one)
        await asyncio.gather(self._fanout.fan_out(direct), *(self._notify(one) for one in others))

    async def _versions(self, targets: list[Update]) -> list[int | str | None]:
        """Per target, the version to tell: its message's, else the current one of
        its state scope, read once per scope and URI (``"?"`` if Redis could not say)."""
        scope_of = self._settings.state_scope

        def where(target: Subscriber, message: contract.UpdateMessage) -> tuple[str, str]:
            return contract.scope_of(target.peer.session, scope_of), message.uri

        unnamed = list(dict.fromkeys(where(t, m) for t, m in targets if m.version is None))
        read = await asyncio.gather(*(self.read_version(scope, uri) for scope, uri in unnamed))
        current = dict(zip(unnamed, read, strict=True))
        return [m.version if m.version is not None else current[where(t, m)] for t, m in targets]

    async def _notify(self, one: Target) -> None:
        """Notify one subscriber through its delivery (a path that is not batched)."""
        target, version, uri = one.target, one.version, one.uri
        delivery = target.delivery
        event("resource/update", f"uri={uri} version={version}", target.peer)
        await self.send(target, UPDATED, uri, version, delivery.updated(uri), one.due_ms)
        if self._settings.send_list_changed:
            await self.send(target, LIST_CHANGED, None, None, delivery.list_changed())

    async def send(
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
        delivered = target.delivery.can_deliver(self._registry)
        problem = "" if delivered else NO_STREAM
        try:
            # Awaited here, not in a task of its own (as wait_for would): the line
            # below is logged before the client could answer the notification.
            async with asyncio.timeout(SEND_TIMEOUT_SECONDS):
                await sending
        except Exception as exc:
            delivered = False
            problem = failed(exc)
            logger.warning("[relay] sending %s to session=%s failed: %r", method, peer.session, exc)
        detail = f"{method} uri={uri}" if uri else method
        event("notification/send", detail, peer, problem)
        recorded_version = version if isinstance(version, int) else None
        await self._recorder.sent(peer, method, uri, recorded_version, delivered, due_ms)

    async def read_version(self, scope: str, uri: str) -> int | str:
        """The current version of ``uri`` in ``scope`` (``"?"`` if Redis could not say)."""
        try:
            return await state.read_version(self._redis, scope, uri)
        except (RedisError, OSError):
            return "?"
