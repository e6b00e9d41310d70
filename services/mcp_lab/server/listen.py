"""``subscriptions/listen`` (protocol 2026-07-28), fed by the same Redis channel as legacy sessions.

Each listen stream is served by the mcp SDK's ``ListenHandler`` over a
``SubscriptionBus`` of its own. The stream registers in the session registry
like a legacy subscriber, with a :class:`~mcp_lab.server.delivery.ListenDelivery`
over its bus (the ``listen`` delivery path); when the relay (which listens on the
Redis updates channel, on every replica) targets it, the delivery publishes
``ResourceUpdated`` (or ``ResourcesListChanged``) on the stream's bus, and the
handler writes the notification onto the stream. A listen
naming a catalog URI counts as a subscribe: the updater schedules the update.

What the 2026-07-28 revision asks of the stream (``basic/patterns/subscriptions.mdx``),
and who does it: the acknowledgement first, every message tagged with the listen
request's id (the SDK's handler); the acknowledgement naming only the honoured subset
(:func:`honoured`: the lab sends resource updates and the resource list's changes,
never a tools or prompts ``list_changed``); and, when the server stops (``closing``),
the final ``{resultType: "complete"}`` result of a graceful end rather than a dropped
stream ("Graceful Closure").
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ServerEvent

from mcp_lab import protocol, untrusted
from mcp_lab.catalog import Catalog
from mcp_lab.contract import Peer
from mcp_lab.logs import event
from mcp_lab.server.delivery import ListenDelivery
from mcp_lab.server.sessions import SessionRegistry, Subscriber

logger = logging.getLogger("mcp_lab.listen")

Subscribe = Callable[[Subscriber, str], Awaitable[str]]
OnEnd = Callable[[Peer, str], Awaitable[None]]
# Called once a listen stream that named resources has ended (its evidence).
OnClosed = Callable[[Peer], Awaitable[None]]
_CLEANUP_SECONDS = 5
# How many of the URIs a listen names its log lines show (a client may name thousands).
_SHOWN_URIS = 5


def _named(uris: list[str]) -> str:
    """URIs a client named, for a log line: the first few, each cut, and how many."""
    shown = [untrusted.cut(uri, untrusted.URI_CHARS) for uri in uris[:_SHOWN_URIS]]
    more = f",...({len(uris)} URIs)" if len(uris) > _SHOWN_URIS else ""
    return ",".join(shown) + more


def asked_for(wanted: mcp_types.SubscriptionFilter) -> str:
    """What a listen asks for, for its log line: the resources it names and the
    list-changed events it wants (``none`` for either when empty)."""
    resources = _named(list(dict.fromkeys(wanted.resource_subscriptions or []))) or "none"
    kinds = {
        "resources": wanted.resources_list_changed,
        "tools": wanted.tools_list_changed,
        "prompts": wanted.prompts_list_changed,
    }
    changed = ",".join(kind for kind, asked in kinds.items() if asked) or "none"
    return f"resources={resources} list_changed={changed}"


def honoured(wanted: mcp_types.SubscriptionFilter) -> mcp_types.SubscriptionFilter:
    """The part of a listen's filter the lab honours: resource updates and the resource
    list's changes. The lab has no tools or prompts that change, so the acknowledgement
    leaves those out ("Notification types the server does not support are omitted")."""
    return mcp_types.SubscriptionFilter(
        resources_list_changed=wanted.resources_list_changed,
        resource_subscriptions=wanted.resource_subscriptions,
    )


async def until_closing(handler: ListenHandler, closing: asyncio.Event) -> None:
    """End ``handler``'s stream gracefully once ``closing`` is set: its final result
    goes out after what it still holds."""
    await closing.wait()
    handler.close()


class StreamBus(InMemorySubscriptionBus):
    """The bus of one listen stream. Events published before the SDK's handler
    has subscribed (the stream registers, and its update may be relayed, a
    moment earlier) are kept and handed over when it subscribes."""

    def __init__(self) -> None:
        super().__init__()
        self._early: list[ServerEvent] | None = []

    async def publish(self, change: ServerEvent) -> None:
        if self._early is not None:
            self._early.append(change)
            return
        await super().publish(change)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        early, self._early = self._early or [], None
        for change in early:
            listener(change)
        return unsubscribe


class ListenStreams:
    """The ``subscriptions/listen`` request handler."""

    def __init__(
        self,
        registry: SessionRegistry,
        peer_of: Callable[[ServerRequestContext[Any]], Peer],
        subscribe: Subscribe,
        on_end: OnEnd,
        catalog: Catalog,
        on_closed: OnClosed | None = None,
        closing: asyncio.Event | None = None,
    ) -> None:
        """``closing``: set when the server starts to stop (``Lab.closing``); each open
        stream then ends with its final result. None: streams end only with the client."""
        self._registry = registry
        self._closing = closing
        self._catalog = catalog
        self._peer_of = peer_of
        self._subscribe = subscribe
        self._on_end = on_end
        self._on_closed = on_closed

    async def __call__(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        peer = self._peer_of(ctx)
        requested = list(dict.fromkeys(params.notifications.resource_subscriptions or []))
        event(protocol.LISTEN, f"opened {asked_for(params.notifications)}", peer)
        unknown = [uri for uri in requested if uri not in self._catalog]
        if unknown:
            # The spec honors a subscription to an unknown URI; it never fires.
            event(
                protocol.LISTEN,
                f"uri={_named(unknown)}",
                peer,
                "error=not-found (never fires)",
            )
        bus = StreamBus()
        subscriber = Subscriber(
            peer=peer,
            delivery=ListenDelivery(bus),
            # Client-chosen request ids repeat across instances of one client.
            key=f"{peer.session}#listen-{uuid.uuid4().hex}",
        )
        if params.notifications.resources_list_changed:
            self._registry.listen_for_list(subscriber)
        try:
            for uri in (u for u in requested if u in self._catalog):
                job = await self._subscribe(subscriber, uri)
                event(protocol.LISTEN, f"uri={uri}", peer, f"job={job}")
            return await self._serve(bus, ctx, params)
        finally:
            # A listen ends when the client goes away, which cancels this request:
            # the cleanup must not be cancelled with it.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                dropped = self._registry.drop(subscriber.key)
                for uri in dropped:
                    await self._on_end(peer, uri)
                event(protocol.LISTEN, "stream ended", peer)
                if dropped and self._on_closed is not None:
                    await self._on_closed(peer)

    async def _serve(
        self,
        bus: StreamBus,
        ctx: ServerRequestContext[Any],
        params: mcp_types.SubscriptionsListenRequestParams,
    ) -> mcp_types.SubscriptionsListenResult:
        """The SDK's handler over ``bus``, for the honoured part of the filter, ended
        gracefully when the server starts to stop."""
        narrowed = params.model_copy(update={"notifications": honoured(params.notifications)})
        handler = ListenHandler(bus)
        if self._closing is None:
            return await handler(ctx, narrowed)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(until_closing, handler, self._closing)
            result = await handler(ctx, narrowed)
            tasks.cancel_scope.cancel()
        return result
