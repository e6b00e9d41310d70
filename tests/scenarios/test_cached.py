"""``cached``'s check, from hand-made events of one session: after the notification, a
read that reached the lab and got version 2; a client notified that never read again is
told its re-read may have come from its cache."""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.cached import SCENARIO, TTL_MS

URI = REVIEW_STATUS.uri


def _event(ts: int, direction: str, method: str, **fields: object) -> Event:
    return Event(
        ts_ms=ts,
        session="s1",
        client="c",
        client_version="1",
        protocol=protocol.MODERN,
        transport="streamable-http",
        direction=direction,
        method=method,
        uri=URI,
        **fields,  # type: ignore[arg-type]
    )


def _notified() -> list[Event]:
    return [
        _event(500, "in", protocol.READ, version=1),
        _event(1_000, "in", protocol.LISTEN),
        _event(2_000, "out", protocol.UPDATED, delivered=True, version=2),
    ]


def _answers(events: list[Event]) -> dict[str, tuple[str, bool]]:
    return {c.key: (c.answer, c.ok) for c in SCENARIO.checks(events, URI)}


def test_it_is_registered_with_a_positive_ttl() -> None:
    assert registry.get("cached") is SCENARIO
    assert SCENARIO.cache_ttl_ms == TTL_MS > 0


def test_a_wire_read_of_version_2_after_the_notification_is_the_ideal() -> None:
    events = [*_notified(), _event(2_100, "in", protocol.READ, version=2)]
    assert _answers(events) == {"wire_re_read": ("yes", True)}


def test_notified_and_never_read_again_may_have_been_served_from_the_cache() -> None:
    assert _answers(_notified()) == {
        "wire_re_read": (
            f"no: a re-read may have been served from its cache (ttlMs {TTL_MS})",
            False,
        )
    }


def test_a_read_after_the_notification_that_got_version_1_says_so() -> None:
    events = [*_notified(), _event(2_100, "in", protocol.READ, version=1)]
    assert _answers(events) == {"wire_re_read": ("no (read version 1)", False)}


def test_a_read_before_the_notification_does_not_count() -> None:
    read, listen, update = _notified()
    events = [read, listen, _event(1_500, "in", protocol.READ, version=1), update]
    assert _answers(events) == {
        "wire_re_read": (
            f"no: a re-read may have been served from its cache (ttlMs {TTL_MS})",
            False,
        )
    }


def test_no_notification_no_answer() -> None:
    assert _answers(_notified()[:2]) == {"wire_re_read": ("no (not notified)", False)}
