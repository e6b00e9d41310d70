"""The sessions this server process holds, and what each one subscribed to.

A subscriber is a legacy session (``resources/subscribe``; key: the session id)
or one ``subscriptions/listen`` stream (key: the peer's session plus the
stream's id). Each is reached through its :class:`~mcp_lab.server.delivery.Delivery`
(a session's GET stream, SSE or stdio connection, or the listen stream); the
registry counts the open GET streams the ``get-stream`` path needs. Only
subscribers connected to this process are here; the Redis set of subscribers (see
:mod:`mcp_lab.contract`) covers all replicas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp_lab.contract import Peer
from mcp_lab.server.delivery import (
    Delivery,
)


@dataclass(slots=True)
class Subscriber:
    """Something that can be notified: its peer, its subscriptions, how to reach it."""

    peer: Peer
    # Its delivery path (mcp_lab.server.delivery): what the relay sends through.
    delivery: Delivery
    uris: set[str] = field(default_factory=set)
    key: str = ""
    # Per URI, the version this subscriber was last told about (or saw when it
    # subscribed): after an outage the relay notifies what is newer.
    known: dict[str, int] = field(default_factory=dict)
    # Per URI, the version it read when it subscribed and when (ms since the epoch):
    # what a Redis that came back empty is given again (mcp_lab.server.restore).
    since: dict[str, tuple[int, int]] = field(default_factory=dict)
    # The scenario's hidden resources listed in this subscriber's scope that it was
    # told of with list_changed (or that were listed before it came): after an
    # outage the relay sends list_changed if more were listed. None: not followed
    # (the scenario hides nothing, or Redis could not say when it came).
    told_listed: set[str] | None = None

    def __post_init__(self) -> None:
        self.key = self.key or self.peer.session


# Bounds of what SessionRegistry.repeated_read notes (sessions; URIs per session).
_READS_SESSIONS = 20_000
_READS_URIS = 32
# The most URIs noted per session for deleting its states when it ends (past it a
# state is left to expire, MCP_TEST_STATE_TTL_SECONDS).
_TOUCHED_URIS = 10_000


class SessionRegistry:
    """Subscribers, known peers and open GET streams of this process."""

    def __init__(self) -> None:
        self._subscribers: dict[str, Subscriber] = {}
        self._peers: dict[str, Peer] = {}
        self._open_streams: dict[str, int] = {}
        # Who hears notifications/resources/list_changed: every legacy session that
        # initialized here, every listen stream that asked for it (by key).
        self._list_listeners: dict[str, Subscriber] = {}
        # Per session, the version of each URI it last read (see repeated_read).
        self._reads: dict[str, dict[str, int]] = {}
        # Per session, every URI it subscribed to (see forget).
        self._touched: dict[str, set[str]] = {}
        # Per URI, its subscribers by session (then by key); per session, its
        # subscriptions here.
        self._by_uri: dict[str, dict[str, dict[str, Subscriber]]] = {}
        self._counts: dict[str, int] = {}

    def repeated_read(self, session: str, uri: str, version: int) -> bool:
        """Whether ``session`` reads ``uri`` at the version it read last (its read
        log line then goes to DEBUG: docs/architecture.md, "Log format"). Bounded:
        past :data:`_READS_SESSIONS` sessions or :data:`_READS_URIS` URIs of one
        session, what was noted is forgotten (a read then counts as new)."""
        seen = self._reads.get(session)
        if seen is None:
            if len(self._reads) >= _READS_SESSIONS:
                self._reads.clear()
            seen = self._reads[session] = {}
        if seen.get(uri) == version:
            return True
        if len(seen) >= _READS_URIS:
            seen.clear()
        seen[uri] = version
        return False

    def remember(self, peer: Peer) -> None:
        """Note a session that initialized here, subscribed or not."""
        self._peers[peer.session] = peer

    def forget(self, session: str) -> set[str]:
        """Drop an ended session from the known peers (and its list listener); returns
        every URI it subscribed to here (whose state the session may own)."""
        self._peers.pop(session, None)
        self._list_listeners.pop(session, None)
        self._reads.pop(session, None)
        return self._touched.pop(session, set())

    def subscriptions(self, session: str) -> int:
        """How many subscriptions ``session`` holds here (over all its streams)."""
        return self._counts.get(session, 0)

    def _count(self, session: str, change: int) -> None:
        left = self._counts.get(session, 0) + change
        if left > 0:
            self._counts[session] = left
        else:
            self._counts.pop(session, None)

    def listen_for_list(self, listener: Subscriber) -> None:
        """``listener`` hears ``list_changed`` from now on (until forgotten or dropped)."""
        self._list_listeners[listener.key] = listener

    def list_listeners(self, session: str | None = None) -> list[Subscriber]:
        """Who hears ``list_changed`` here (only ``session``'s, when given)."""
        return [
            listener
            for listener in self._list_listeners.values()
            if session is None or listener.peer.session == session
        ]

    def peer(self, session: str) -> Peer | None:
        """The peer of a session that initialized here."""
        return self._peers.get(session)

    def stream_opened(self, session: str) -> None:
        """The standalone GET stream of Streamable HTTP ``session`` opened here."""
        self._open_streams[session] = self._open_streams.get(session, 0) + 1

    def stream_closed(self, session: str) -> None:
        """A standalone stream of ``session`` closed."""
        left = self._open_streams.get(session, 0) - 1
        if left > 0:
            self._open_streams[session] = left
        else:
            self._open_streams.pop(session, None)

    def get_stream_open(self, session: str) -> bool:
        """Whether a standalone GET stream of ``session`` is open here (what a
        ``get-stream`` delivery needs, :class:`~mcp_lab.server.delivery.OpenStreams`)."""
        return self._open_streams.get(session, 0) > 0

    def subscribe(self, subscriber: Subscriber, uri: str) -> Subscriber:
        """Add ``uri`` to the subscriptions of ``subscriber`` (or of the one already
        registered under its key, which is returned)."""
        entry = self._subscribers.setdefault(subscriber.key, subscriber)
        if uri not in entry.uris:
            entry.uris.add(uri)
            by_session = self._by_uri.setdefault(uri, {})
            by_session.setdefault(entry.peer.session, {})[entry.key] = entry
            self._count(entry.peer.session, 1)
        touched = self._touched.setdefault(subscriber.peer.session, set())
        if len(touched) < _TOUCHED_URIS:
            touched.add(uri)
        return entry

    def unsubscribe(self, key: str, uri: str) -> bool:
        """Drop one subscription; True if it existed."""
        entry = self._subscribers.get(key)
        if entry is None or uri not in entry.uris:
            return False
        entry.uris.discard(uri)
        self._unindex(entry, uri)
        self._count(entry.peer.session, -1)
        if not entry.uris:
            del self._subscribers[key]
        return True

    def _unindex(self, entry: Subscriber, uri: str) -> None:
        by_session = self._by_uri.get(uri)
        by_key = by_session.get(entry.peer.session) if by_session is not None else None
        if by_session is None or by_key is None:
            return
        by_key.pop(entry.key, None)
        if not by_key:
            del by_session[entry.peer.session]
            if not by_session:
                del self._by_uri[uri]

    def drop(self, key: str) -> set[str]:
        """Forget a subscriber (an ended session or stream); returns its URIs."""
        self._list_listeners.pop(key, None)
        entry = self._subscribers.pop(key, None)
        if entry is None:
            return set()
        for uri in entry.uris:
            self._unindex(entry, uri)
        self._count(entry.peer.session, -len(entry.uris))
        return set(entry.uris)

    def all_subscribers(self) -> list[Subscriber]:
        """Every subscriber here."""
        return list(self._subscribers.values())

    def subscribers(self, uri: str, session: str | None = None) -> list[Subscriber]:
        """Subscribers here to ``uri`` (only those of ``session``, when given)."""
        by_session = self._by_uri.get(uri)
        if not by_session:
            return []
        if session is not None:
            return list(by_session.get(session, {}).values())
        return [s for by_key in by_session.values() for s in by_key.values()]

    def __len__(self) -> int:
        """Number of live sessions known here."""
        return len(self._peers)
