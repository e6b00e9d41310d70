"""``subscriptions/listen`` (protocol 2026-07-28), fed by the same Redis channel as legacy sessions.

Each listen stream is served by the mcp SDK's ``ListenHandler`` over a
``SubscriptionBus`` of its own. The stream registers in the session registry
like a legacy subscriber; when the relay (which listens on the Redis updates
channel, on every replica) targets it, it publishes ``ResourceUpdated`` on the
stream's bus, and the handler writes the notification onto the stream. A listen
naming a catalog URI counts as a subscribe: the updater schedules the update.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ResourceUpdated,
)

from services import contract
from services.eventlog import Peer, event
from services.sessions import SessionRegistry, Subscriber

logger = logging.getLogger("mcp_lab")

OnSubscribe = Callable[[Peer, str], Awaitable[str]]
OnEnd = Callable[[Peer, str], Awaitable[None]]


class ListenStreams:
    """The ``subscriptions/listen`` request handler."""

    def __init__(
        self,
        registry: SessionRegistry,
        peer_of: Callable[[ServerRequestContext[Any]], Peer],
        on_subscribe: OnSubscribe,
        on_end: OnEnd,
    ) -> None:
        self._registry = registry
        self._peer_of = peer_of
        self._on_subscribe = on_subscribe
        self._on_end = on_end

    async def __call__(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        peer = self._peer_of(ctx)
        requested = list(params.notifications.resource_subscriptions or [])
        uris = [uri for uri in requested if uri in contract.CATALOG]
        for uri in requested:
            if uri not in contract.CATALOG:
                # The spec honors a subscription to an unknown URI; it never fires.
                event("subscriptions/listen", f"uri={uri}", peer, "error=not-found (never fires)")
        bus = InMemorySubscriptionBus()
        subscriber = Subscriber(
            peer=peer,
            send_updated=lambda uri: bus.publish(ResourceUpdated(uri=uri)),
            send_list_changed=lambda: bus.publish(ResourcesListChanged()),
            key=f"{peer.session}#listen-{ctx.request_id}",
            always_open=True,
        )
        try:
            for uri in uris:
                self._registry.subscribe(subscriber, uri)
                job = await self._on_subscribe(peer, uri)
                event("subscriptions/listen", f"uri={uri}", peer, f"job={job}")
            # No await between the jobs above and the handler's own bus
            # subscription (its first, synchronous step): no update can be missed.
            return await ListenHandler(bus)(ctx, params)
        finally:
            for uri in self._registry.drop(subscriber.key):
                await self._on_end(peer, uri)
            event("subscriptions/listen", "stream ended", peer)
