"""How a notification reaches a subscriber: its delivery path, one interface for all.

The relay (:mod:`mcp_lab.server.relay`, :mod:`mcp_lab.server.notify`) tells each
:class:`~mcp_lab.server.sessions.Subscriber` of its updates through the subscriber's
:class:`Delivery`, without knowing which path it is. The paths, by :class:`DeliveryKind`:

``get-stream`` (:class:`GetStreamDelivery`)
    A 2025-era Streamable HTTP session (``resources/subscribe``, and the session's
    ``list_changed`` listener from ``initialize``). Its notifications travel on the
    session's standalone GET stream, so it can deliver only while that stream is
    open (the registry counts the open GETs: ``resume/get_streams.py``). When the
    adapter found the session's GET stream to write to directly
    (``mcp_adapter.get_stream_of``) and the session still takes messages, the path
    is *batched*: the fan-out (:mod:`mcp_lab.server.fanout`) writes it together with
    the other sessions of a round, and stores its event for resumption whether or
    not the GET stream is open. Otherwise each notification goes through the SDK's
    ``ServerSession`` senders, which drop it silently when no GET stream is open.
``sse`` and ``stdio`` (:class:`ConnectionDelivery`)
    A legacy SSE session, or the one client of a stdio server: the connection is
    the stream, so it can always deliver; each notification goes through the SDK's
    ``ServerSession`` senders, one by one.
``listen`` (:class:`ListenDelivery`)
    One 2026-07-28 ``subscriptions/listen`` stream: the request is the stream, so it
    can always deliver; each notification is published on the stream's own bus
    (``listen.StreamBus``) and the SDK's ``ListenHandler`` writes it onto the stream.

Where each is built: the session paths in ``handlers.py`` (``initialize`` and
``resources/subscribe``; today through the session keywords of ``Subscriber``, which
call :func:`session_delivery`), the listen path in ``listen.py``
(``ListenStreams.__call__``).

A new path sent one by one touches this module (a kind and a class) and the
module that sets the path up (it builds the delivery and registers the subscriber);
notify.py, relay.py and sessions.py stay as they are. A new batched path touches
notify.py and fanout.py as well: the fan-out writes GET streams only
(:class:`GetStreamDelivery`). Whatever reaches into fastmcp's or mcp's private parts
for a path stays in :mod:`mcp_lab.server.mcp_adapter`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated, SubscriptionBus

from mcp_lab.contract import Peer, Transport
from mcp_lab.server.mcp_adapter import GetStream

SendUpdated = Callable[[str], Awaitable[None]]
SendListChanged = Callable[[], Awaitable[None]]


class DeliveryKind(StrEnum):
    """The delivery paths, by the names logs and evidence may give them."""

    GET_STREAM = "get-stream"
    SSE = "sse"
    STDIO = "stdio"
    LISTEN = "listen"


class OpenStreams(Protocol):
    """Which sessions have a standalone GET stream open here (the session registry)."""

    def get_stream_open(self, session: str) -> bool: ...


class Delivery(Protocol):
    """What every delivery path offers the relay."""

    @property
    def kind(self) -> DeliveryKind:
        """Which path this is."""
        ...

    @property
    def batched(self) -> bool:
        """Whether the fan-out writes this path's notifications (with the rest of a
        round) rather than :meth:`updated` and :meth:`list_changed` one by one."""
        ...

    def can_deliver(self, streams: OpenStreams) -> bool:
        """Whether a notification sent now has an open stream to travel on."""
        ...

    def updated(self, uri: str) -> Awaitable[None]:
        """Send ``notifications/resources/updated`` for ``uri`` (awaited by the caller,
        within its bound)."""
        ...

    def list_changed(self) -> Awaitable[None]:
        """Send ``notifications/resources/list_changed``."""
        ...


@dataclass(frozen=True, slots=True)
class GetStreamDelivery:
    """A Streamable HTTP session: its standalone GET stream (see the module docstring)."""

    session: str
    send_updated: SendUpdated
    send_list_changed: SendListChanged
    # The GET stream the fan-out writes to; None: the SDK's senders carry every message.
    stream: GetStream | None = None

    @property
    def kind(self) -> DeliveryKind:
        return DeliveryKind.GET_STREAM

    @property
    def batched(self) -> bool:
        return self.stream is not None and self.stream.usable

    def can_deliver(self, streams: OpenStreams) -> bool:
        return streams.get_stream_open(self.session)

    def updated(self, uri: str) -> Awaitable[None]:
        return self.send_updated(uri)

    def list_changed(self) -> Awaitable[None]:
        return self.send_list_changed()


@dataclass(frozen=True, slots=True)
class ConnectionDelivery:
    """A session whose connection is its stream (legacy SSE, stdio)."""

    kind: DeliveryKind
    send_updated: SendUpdated
    send_list_changed: SendListChanged

    @property
    def batched(self) -> bool:
        return False

    def can_deliver(self, streams: OpenStreams) -> bool:
        return True

    def updated(self, uri: str) -> Awaitable[None]:
        return self.send_updated(uri)

    def list_changed(self) -> Awaitable[None]:
        return self.send_list_changed()


@dataclass(frozen=True, slots=True)
class ListenDelivery:
    """One ``subscriptions/listen`` stream: events published on its own bus."""

    bus: SubscriptionBus

    @property
    def kind(self) -> DeliveryKind:
        return DeliveryKind.LISTEN

    @property
    def batched(self) -> bool:
        return False

    def can_deliver(self, streams: OpenStreams) -> bool:
        return True

    def updated(self, uri: str) -> Awaitable[None]:
        return self.bus.publish(ResourceUpdated(uri=uri))

    def list_changed(self) -> Awaitable[None]:
        return self.bus.publish(ResourcesListChanged())


def session_delivery(
    peer: Peer,
    send_updated: SendUpdated,
    send_list_changed: SendListChanged,
    stream: GetStream | None = None,
) -> GetStreamDelivery | ConnectionDelivery:
    """The delivery of a session's notifications (``ServerSession``'s two senders):
    its GET stream on Streamable HTTP (``stream``, if given, for the fan-out), else
    its connection, SSE or stdio by ``peer``'s transport. A connection has no GET
    stream for the fan-out: ``get_stream_of`` finds one only for a session the
    Streamable HTTP manager holds."""
    if peer.on_streamable_http:
        return GetStreamDelivery(peer.session, send_updated, send_list_changed, stream)
    kind = DeliveryKind.STDIO if peer.transport == Transport.STDIO else DeliveryKind.SSE
    return ConnectionDelivery(kind, send_updated, send_list_changed)
