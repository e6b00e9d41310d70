"""The sessions this server process holds, and what each one subscribed to.

Only the sessions connected to this process are here; the Redis set of
subscribers (see :mod:`services.contract`) covers all replicas.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from services.eventlog import Peer

SendUpdated = Callable[[str], Awaitable[None]]
SendListChanged = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class Subscriber:
    """A live session with its subscriptions and the means to notify it."""

    peer: Peer
    send_updated: SendUpdated
    send_list_changed: SendListChanged
    uris: set[str] = field(default_factory=set)


class SessionRegistry:
    """Subscriptions of the sessions connected to this process."""

    def __init__(self) -> None:
        self._by_session: dict[str, Subscriber] = {}
        self._peers: dict[str, Peer] = {}
        self._open_streams: dict[str, int] = {}

    def stream_opened(self, session: str) -> None:
        """A standalone GET stream of ``session`` opened here."""
        self._open_streams[session] = self._open_streams.get(session, 0) + 1

    def stream_closed(self, session: str) -> None:
        """A standalone GET stream of ``session`` closed."""
        left = self._open_streams.get(session, 0) - 1
        if left > 0:
            self._open_streams[session] = left
        else:
            self._open_streams.pop(session, None)

    def has_stream(self, session: str) -> bool:
        """Whether a notification to ``session`` has an open stream to travel on."""
        return self._open_streams.get(session, 0) > 0

    def remember(self, peer: Peer) -> None:
        """Note a session that initialized here, subscribed or not."""
        self._peers[peer.session] = peer

    def forget(self, session: str) -> None:
        """Drop an ended session from the known peers."""
        self._peers.pop(session, None)

    def peer(self, session: str) -> Peer | None:
        """The peer of a session that initialized here."""
        return self._peers.get(session)

    def subscribe(self, subscriber: Subscriber, uri: str) -> None:
        """Add ``uri`` to the subscriptions of ``subscriber``'s session."""
        entry = self._by_session.setdefault(subscriber.peer.session, subscriber)
        entry.uris.add(uri)

    def unsubscribe(self, session: str, uri: str) -> bool:
        """Drop one subscription; True if it existed."""
        entry = self._by_session.get(session)
        if entry is None or uri not in entry.uris:
            return False
        entry.uris.discard(uri)
        if not entry.uris:
            del self._by_session[session]
        return True

    def drop_session(self, session: str) -> set[str]:
        """Forget an ended session; returns the URIs it was subscribed to."""
        entry = self._by_session.pop(session, None)
        return set(entry.uris) if entry else set()

    def subscribers(self, uri: str, session: str | None = None) -> list[Subscriber]:
        """Sessions here subscribed to ``uri`` (only ``session``, when given)."""
        if session is not None:
            entry = self._by_session.get(session)
            return [entry] if entry is not None and uri in entry.uris else []
        return [s for s in self._by_session.values() if uri in s.uris]

    def __len__(self) -> int:
        """Number of live sessions known here."""
        return len(self._peers)
