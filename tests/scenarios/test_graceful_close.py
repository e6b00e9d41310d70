"""``graceful-close``'s checks, from hand-made events of one session: a graceful end of
the listen stream after the update, and how many listens the client opens afterwards in
the observation window (the ideal: none); a 2025-era subscriber is "not supported"."""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.graceful_close import CLOSE, SCENARIO

URI = REVIEW_STATUS.uri
WINDOW_MS = int(CLOSE.window * 1000)


def _event(ts: int, direction: str, method: str, uri: str | None = None, **fields: object) -> Event:
    return Event(
        ts_ms=ts,
        session="s1",
        client="c",
        client_version="1",
        protocol=protocol.MODERN,
        transport="streamable-http",
        direction=direction,
        method=method,
        uri=uri,
        **fields,  # type: ignore[arg-type]
    )


def _listened_then_closed(ended_at: int = 4_000) -> list[Event]:
    """Listen at 1 s, the update at 2 s and its re-read, the stream's end at ``ended_at``."""
    return [
        _event(1_000, "in", protocol.LISTEN, URI),
        _event(2_000, "out", protocol.UPDATED, URI, delivered=True, version=2),
        _event(2_100, "in", protocol.READ, URI, version=2),
        _event(ended_at, "in", protocol.LISTEN_CLOSED),
    ]


def _answers(events: list[Event]) -> dict[str, tuple[str, bool]]:
    return {
        c.key: (c.answer, c.ok) for c in SCENARIO.checks(sorted(events, key=lambda e: e.ts_ms), URI)
    }


def test_it_is_registered_and_ends_listen_streams() -> None:
    assert registry.get("graceful-close") is SCENARIO
    assert SCENARIO.listen_close is CLOSE and CLOSE.after > 0


def test_no_listen_after_the_graceful_close_is_the_ideal() -> None:
    assert _answers(_listened_then_closed()) == {
        "stream_ended": ("yes", True),
        "relistened": ("0", True),
    }


def test_each_listen_in_the_window_after_the_close_is_counted() -> None:
    events = [
        *_listened_then_closed(),
        _event(4_050, "in", protocol.LISTEN, URI),
        _event(4_000 + WINDOW_MS, "in", protocol.LISTEN),  # list changes only: still a listen
        _event(4_001 + WINDOW_MS, "in", protocol.LISTEN, URI),  # past the window
    ]
    assert _answers(events)["relistened"] == ("2", False)


def test_one_listen_again_is_already_one_too_many() -> None:
    events = [*_listened_then_closed(), _event(9_000, "in", protocol.LISTEN, URI)]
    assert _answers(events)["relistened"] == ("1", False)


def test_a_listen_held_from_before_the_close_is_not_a_new_one() -> None:
    events = [_event(500, "in", protocol.LISTEN), *_listened_then_closed()]
    assert _answers(events)["relistened"] == ("0", True)


def test_a_stream_that_never_ended_has_no_relisten_answer() -> None:
    events = _listened_then_closed()[:-1]
    assert _answers(events) == {"stream_ended": ("no", False)}


def test_no_update_no_end() -> None:
    events = [_event(1_000, "in", protocol.LISTEN, URI)]
    assert _answers(events) == {"stream_ended": ("no (no update)", False)}


def test_a_2025_subscriber_is_not_supported_not_failed() -> None:
    events = [
        _event(1_000, "in", protocol.SUBSCRIBE, URI),
        _event(2_000, "out", protocol.UPDATED, URI, delivered=True, version=2),
    ]
    assert _answers(events) == {"relistened": ("not supported (resources/subscribe)", True)}


def test_a_client_that_never_subscribed() -> None:
    assert _answers([_event(1_000, "in", protocol.READ, URI, version=1)]) == {
        "stream_ended": ("not subscribed", False)
    }
