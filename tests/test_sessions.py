"""Unit tests of the in-process session registry."""

from __future__ import annotations

from services.server.peers import Peer
from services.server.sessions import SessionRegistry, Subscriber

URI = "test://review/status"


async def _noop(*_: object) -> None:
    return None


def _subscriber(session: str) -> Subscriber:
    return Subscriber(Peer(session, "c", "1"), send_updated=_noop, send_list_changed=_noop)


def test_subscribers_are_found_by_uri_and_by_session() -> None:
    registry = SessionRegistry()
    registry.subscribe(_subscriber("a"), URI)
    registry.subscribe(_subscriber("b"), URI)
    assert {s.peer.session for s in registry.subscribers(URI)} == {"a", "b"}
    assert [s.peer.session for s in registry.subscribers(URI, "b")] == ["b"]
    assert registry.subscribers(URI, "zzz") == []
    assert registry.subscribers("test://other") == []


def test_unsubscribe_and_session_end_remove_the_session() -> None:
    registry = SessionRegistry()
    registry.subscribe(_subscriber("a"), URI)
    registry.subscribe(_subscriber("b"), URI)
    assert registry.unsubscribe("a", URI) is True
    assert registry.unsubscribe("a", URI) is False
    assert registry.drop("b") == {URI}
    assert registry.subscribers(URI) == []
