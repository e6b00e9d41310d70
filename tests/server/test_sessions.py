"""Unit tests of the in-process session registry."""

from __future__ import annotations

from mcp_lab.contract import Peer
from mcp_lab.server.delivery import GetStreamDelivery
from mcp_lab.server.sessions import SessionRegistry, Subscriber

URI = "test://review/status"


async def _noop(*_: object) -> None:
    return None


def _subscriber(session: str) -> Subscriber:
    return Subscriber(Peer(session, "c", "1"), GetStreamDelivery(session, _noop, _noop))


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


def test_a_read_repeats_only_the_version_its_session_read_last() -> None:
    registry = SessionRegistry()
    assert not registry.repeated_read("a", URI, 1)
    assert registry.repeated_read("a", URI, 1)
    assert not registry.repeated_read("b", URI, 1)  # another session
    assert not registry.repeated_read("a", "test://other", 1)  # another URI
    assert not registry.repeated_read("a", URI, 2)  # a new version
    assert registry.repeated_read("a", URI, 2)
    registry.forget("a")
    assert not registry.repeated_read("a", URI, 2)  # an ended session is forgotten
