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
stream ("Graceful Closure"). A scenario may also have the lab end each stream itself,
gracefully, some seconds after the stream's first update (``Scenario.listen_close``,
:func:`close_after_update`).
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
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourceUpdated,
    ServerEvent,
)

from mcp_lab import protocol, untrusted
from mcp_lab.catalog import Catalog
from mcp_lab.contract import Peer
from mcp_lab.logs import event
from mcp_lab.scenarios.scenario import ListenClose
from mcp_lab.server.delivery import ListenDelivery
from mcp_lab.server.listen_drop import ListenDrops
from mcp_lab.server.sessions import SessionRegistry, Subscriber

logger = logging.getLogger("mcp_lab.listen")

Subscribe = Callable[[Subscriber, str], Awaitable[str]]
OnEnd = Callable[[Peer, str], Awaitable[None]]
# Called once a listen stream that named resources has ended (its evidence).
OnClosed = Callable[[Peer], Awaitable[None]]
# Records a URI a listen named that its acknowledgement leaves out (its evidence).
OnUnacknowledged = Callable[[Peer, str], Awaitable[None]]
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


def honoured(
    wanted: mcp_types.SubscriptionFilter, left_out: frozenset[str] = frozenset()
) -> mcp_types.SubscriptionFilter:
    """The part of a listen's filter the lab honours: resource updates and the resource
    list's changes. The lab has no tools or prompts that change, so the acknowledgement
    leaves those out ("Notification types the server does not support are omitted");
    it leaves out the URIs of ``left_out`` too (a scenario's partial acknowledgement:
    "a URI it will not watch is simply absent")."""
    named = wanted.resource_subscriptions
    return mcp_types.SubscriptionFilter(
        resources_list_changed=wanted.resources_list_changed,
        resource_subscriptions=None if named is None else [u for u in named if u not in left_out],
    )


async def until_closing(handler: ListenHandler, closing: asyncio.Event) -> None:
    """End ``handler``'s stream gracefully once ``closing`` is set: its final result
    goes out after what it still holds."""
    await closing.wait()
    handler.close()


async def close_after_update(
    handler: ListenHandler, bus: StreamBus, close: ListenClose, peer: Peer
) -> None:
    """End ``handler``'s stream gracefully ``close.after`` seconds past its first update
    (a scenario's :class:`~mcp_lab.scenarios.scenario.ListenClose`). Bounded by the
    stream: the task is cancelled when the stream ends first."""
    await bus.updated.wait()
    with anyio.move_on_after(close.after):
        await anyio.Event().wait()  # the scenario's pause; nothing sets it
    event(protocol.LISTEN, f"closing gracefully {close.after:g} s after the update", peer)
    handler.close()


class StreamBus(InMemorySubscriptionBus):
    """The bus of one listen stream. Events published before the SDK's handler
    has subscribed (the stream registers, and its update may be relayed, a
    moment earlier) are kept and handed over when it subscribes. ``updated`` is set
    once a resource update is published."""

    def __init__(self) -> None:
        super().__init__()
        self._early: list[ServerEvent] | None = []
        self.updated = anyio.Event()
        self.dropped = False  # the lab dropped the stream (dropped-stream)

    async def publish(self, change: ServerEvent) -> None:
        if isinstance(change, ResourceUpdated):
            self.updated.set()
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
        close: ListenClose | None = None,
        unacknowledged: frozenset[str] = frozenset(),
        on_unacknowledged: OnUnacknowledged | None = None,
        drops: ListenDrops | None = None,
    ) -> None:
        """``closing``: set when the server starts to stop (``Lab.closing``); each open
        stream then ends with its final result. None: streams end only with the client.
        ``close``: the scenario's own graceful end of each stream, after its update.
        ``unacknowledged``: catalog URIs the acknowledgement leaves out (the scenario's
        partial ack); the lab does not watch them, and ``on_unacknowledged`` records
        each one a listen names. ``drops``: the scenario drops each client's first
        stream (:class:`~mcp_lab.server.listen_drop.ListenDrops`)."""
        self._unacknowledged = unacknowledged
        self._on_unacknowledged = on_unacknowledged
        self._drops = drops
        self._registry = registry
        self._close = close
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
        left_out = [uri for uri in requested if uri in self._unacknowledged]
        if left_out:
            event(protocol.LISTEN, f"uri={_named(left_out)}", peer, "not acknowledged (partial)")
            if self._on_unacknowledged is not None:
                for uri in left_out:
                    await self._on_unacknowledged(peer, uri)
        dropping = False
        try:
            for uri in (u for u in requested if u in self._catalog and u not in left_out):
                job = await self._subscribe(subscriber, uri)
                event(protocol.LISTEN, f"uri={uri}", peer, f"job={job}")
            if self._drops is not None and subscriber.uris:
                dropping = not await self._drops.kept_for(subscriber)
            return await self._serve(bus, ctx, params, peer, subscriber if dropping else None)
        finally:
            # A listen ends when the client goes away, which cancels this request:
            # the cleanup must not be cancelled with it.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS):
                await self._end(subscriber, dropping and bus.dropped)

    async def _end(self, subscriber: Subscriber, dropped_by_the_lab: bool) -> None:
        """A stream's end: its subscriptions leave the registry; in Redis they are
        forgotten (or, after the lab dropped the stream, kept for a while), and the
        client's close is recorded (a drop was recorded as the lab's)."""
        peer = subscriber.peer
        uris = self._registry.drop(subscriber.key)
        if dropped_by_the_lab and self._drops is not None:
            self._drops.keep(peer, sorted(uris))
            event(protocol.LISTEN, "stream ended (dropped by the lab)", peer)
            return
        for uri in uris:
            await self._on_end(peer, uri)
        event(protocol.LISTEN, "stream ended", peer)
        if uris and self._on_closed is not None:
            await self._on_closed(peer)

    async def _serve(
        self,
        bus: StreamBus,
        ctx: ServerRequestContext[Any],
        params: mcp_types.SubscriptionsListenRequestParams,
        peer: Peer,
        to_drop: Subscriber | None = None,
    ) -> mcp_types.SubscriptionsListenResult:
        """The SDK's handler over ``bus``, for the honoured part of the filter, ended
        gracefully when the server starts to stop (or the scenario's ``close`` says),
        or dropped without its result before its update (``to_drop``: the scenario's
        drop of this stream)."""
        kept = honoured(params.notifications, self._unacknowledged)
        narrowed = params.model_copy(update={"notifications": kept})
        handler = ListenHandler(bus)
        if self._closing is None and self._close is None and to_drop is None:
            return await handler(ctx, narrowed)
        async with anyio.create_task_group() as tasks:
            if self._closing is not None:
                tasks.start_soon(until_closing, handler, self._closing)
            if self._close is not None:
                tasks.start_soon(close_after_update, handler, bus, self._close, peer)
            if to_drop is not None and self._drops is not None:
                tasks.start_soon(self._drops.drop_before_update, to_drop, bus)
            result = await handler(ctx, narrowed)
            tasks.cancel_scope.cancel()
        return result
