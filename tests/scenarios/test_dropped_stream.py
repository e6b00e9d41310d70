"""``dropped-stream``'s checks, from hand-made events of one session: the lab dropped
the listen stream before the update, did the client listen again, and did the update
reach it on the new stream? A 2025-era subscriber is "not supported"."""

from __future__ import annotations

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.dropped_stream import DROP, SCENARIO, UPDATE_LATER

URI = REVIEW_STATUS.uri


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


def _dropped() -> list[Event]:
    """Listen at 1 s, dropped by the lab 0.3 s later."""
    return [
        _event(1_000, "in", protocol.LISTEN, URI),
        _event(1_300, "out", protocol.LISTEN_DROPPED),
    ]


def _answers(events: list[Event]) -> dict[str, tuple[str, bool]]:
    ordered = sorted(events, key=lambda e: e.ts_ms)
    return {c.key: (c.answer, c.ok) for c in SCENARIO.checks(ordered, URI)}


def test_it_is_registered_and_drops_before_the_update() -> None:
    assert registry.get("dropped-stream") is SCENARIO
    assert SCENARIO.listen_drop is DROP and SCENARIO.listen_close is None
    # The update is due UPDATE_LATER s past the lab's delay: the drop comes first.
    assert DROP.after < UPDATE_LATER and SCENARIO.timeline[0].after == UPDATE_LATER


def test_listening_again_and_getting_the_update_is_the_ideal() -> None:
    events = [
        *_dropped(),
        _event(1_350, "in", protocol.LISTEN, URI),
        _event(3_000, "out", protocol.UPDATED, URI, delivered=True, version=2),
    ]
    assert _answers(events) == {
        "stream_dropped": ("yes", True),
        "relistened": ("yes", True),
        "kept_update": ("yes", True),
    }


def test_a_client_that_never_listens_again() -> None:
    assert _answers(_dropped()) == {"stream_dropped": ("yes", True), "relistened": ("no", False)}


def test_an_update_not_delivered_is_not_kept() -> None:
    events = [
        *_dropped(),
        _event(1_350, "in", protocol.LISTEN, URI),
        _event(3_000, "out", protocol.UPDATED, URI, delivered=False, version=2),
    ]
    assert _answers(events)["kept_update"] == ("no", False)


def test_a_listen_the_lab_never_dropped() -> None:
    events = [_event(1_000, "in", protocol.LISTEN, URI)]
    assert _answers(events) == {"stream_dropped": ("no", False)}


def test_a_2025_subscriber_is_not_supported_not_failed() -> None:
    events = [_event(1_000, "in", protocol.SUBSCRIBE, URI)]
    assert _answers(events) == {"relistened": ("not supported (resources/subscribe)", True)}


def test_a_client_that_never_subscribed() -> None:
    assert _answers([_event(1_000, "in", protocol.READ, URI, version=1)]) == {
        "stream_dropped": ("not subscribed", False)
    }
