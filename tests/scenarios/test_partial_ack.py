"""``partial-ack``'s check, from hand-made events of one session: after its listen
opened (and its acknowledgement left test://review/notes out, which the lab records),
did the client read that resource itself? A client whose listen never named it was
"not asked"; a 2025-era subscriber is "not supported"."""

from __future__ import annotations

import dataclasses

from mcp_lab import protocol
from mcp_lab.catalog import REVIEW_NOTES, REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks, registry
from mcp_lab.scenarios.partial_ack import SCENARIO

URI, NOTES = REVIEW_STATUS.uri, REVIEW_NOTES.uri


def _event(ts: int, method: str, uri: str | None = None, **fields: object) -> Event:
    return Event(
        ts_ms=ts,
        session="s1",
        client="c",
        client_version="1",
        protocol=protocol.MODERN,
        transport="streamable-http",
        direction="in",
        method=method,
        uri=uri,
        **fields,  # type: ignore[arg-type]
    )


def _left_out(ts: int) -> Event:
    """The lab's record that the acknowledgement left the notes out."""
    return dataclasses.replace(_event(ts, protocol.LISTEN_UNACKNOWLEDGED, NOTES), direction="out")


def _listen(ts: int, uri: str = URI) -> list[Event]:
    """A listen naming ``uri`` and the notes, the notes left out of its ack."""
    return [_event(ts, protocol.LISTEN, uri), _left_out(ts)]


def _answers(events: list[Event]) -> dict[str, tuple[str, bool]]:
    ordered = sorted(events, key=lambda e: e.ts_ms)
    return {c.key: (c.answer, c.ok) for c in SCENARIO.checks(ordered, URI)}


def test_it_is_registered_and_leaves_the_notes_out_of_the_ack() -> None:
    assert registry.get("partial-ack") is SCENARIO
    assert SCENARIO.unacknowledged == frozenset({NOTES})
    assert SCENARIO.play.also_watch == (NOTES,) and NOTES in SCENARIO.catalog


def test_reading_the_unwatched_resource_after_the_listen_is_the_ideal() -> None:
    events = [*_listen(1_000), _event(1_200, protocol.READ, NOTES, version=1)]
    assert _answers(events) == {"unwatched_read": ("yes", True)}


def test_a_listen_that_never_named_the_notes_was_not_asked() -> None:
    events = [_event(1_000, protocol.LISTEN, URI), _event(1_200, protocol.READ, NOTES, version=1)]
    answer, ok = _answers(events)["unwatched_read"]
    assert answer.startswith(checks.NOT_ASKED) and not ok, answer


def test_a_read_before_the_listen_only_does_not_count() -> None:
    events = [_event(500, protocol.READ, NOTES, version=1), *_listen(1_000)]
    assert _answers(events) == {"unwatched_read": ("no", False)}


def test_a_failed_read_does_not_count() -> None:
    events = [
        *_listen(1_000),
        _event(1_200, protocol.READ, NOTES, error=-32602),
    ]
    assert _answers(events) == {"unwatched_read": ("no", False)}


def test_a_listen_naming_the_notes_first_counts_as_the_listen() -> None:
    events = [*_listen(1_000, NOTES), _event(1_200, protocol.READ, NOTES, version=1)]
    assert _answers(events) == {"unwatched_read": ("yes", True)}


def test_a_2025_subscriber_is_not_supported_not_failed() -> None:
    events = [_event(1_000, protocol.SUBSCRIBE, URI)]
    assert _answers(events) == {"unwatched_read": ("not supported (resources/subscribe)", True)}


def test_a_client_that_never_subscribed() -> None:
    assert _answers([_event(1_000, protocol.READ, URI, version=1)]) == {
        "unwatched_read": ("not subscribed", False)
    }
