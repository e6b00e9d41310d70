"""Notes that say why a session stopped at level 1-3, from its evidence alone (issue 11)."""

from __future__ import annotations

import pytest

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import REASON_UNADVERTISED, Event
from mcp_lab.evidence.session_scoring import score_session

STATUS_URI = REVIEW_STATUS.uri
UPDATED = "notifications/resources/updated"


def ev(
    ts: int,
    method: str,
    direction: str = "in",
    *,
    uri: str | None = None,
    version: int | None = None,
    delivered: bool | None = None,
    error: int | None = None,
    reason: str | None = None,
) -> Event:
    return Event(ts, "s1", "cli", "1.0", "2025-11-25", "streamable-http", direction, method,
                 uri, version, delivered, error, reason=reason)  # fmt: skip


CONNECT = ev(1000, "initialize")
LIST = ev(1100, "resources/list")
READ_1 = ev(1200, "resources/read", uri=STATUS_URI, version=1)
SUBSCRIBE = ev(1300, "resources/subscribe", uri=STATUS_URI)
NOTIFIED = ev(6300, UPDATED, "out", uri=STATUS_URI, version=2, delivered=True)


def _stream(ts: int, method: str, direction: str = "in") -> Event:
    return ev(ts, method, direction)


def test_a_refused_unadvertised_list_as_the_last_request_is_why_it_left() -> None:
    tools = ev(1100, "tools/list", error=-32601)
    closed = ev(1200, "notifications/cancelled")
    score = score_session([CONNECT, tools, closed])
    assert score.level == 1
    assert "asked tools/list (not advertised) and left after the error" in score.notes
    assert "never sent resources/subscribe" in score.notes


def test_a_refused_list_followed_by_more_requests_is_only_noted() -> None:
    tools = ev(1100, "tools/list", error=-32601)
    score = score_session([CONNECT, tools, LIST])
    assert "asked tools/list (not advertised) refused with -32601" in score.notes


def test_answered_unadvertised_lists_are_noted_at_any_level() -> None:
    tools = ev(1100, "tools/list", reason=REASON_UNADVERTISED)
    prompts = ev(1150, "prompts/list", reason=REASON_UNADVERTISED)
    again = ev(1160, "tools/list", reason=REASON_UNADVERTISED)
    score = score_session([CONNECT, tools, prompts, again, LIST, READ_1, SUBSCRIBE, NOTIFIED])
    assert score.level == 5
    assert (
        "asked tools/list, prompts/list (not advertised by default; answered, not refused)"
        in score.notes
    )


def test_a_tools_list_answered_while_tools_are_advertised_is_no_note() -> None:
    # MCP_TEST_ENABLE_TOOL=true: FastMCP serves tools/list itself; nothing to say.
    score = score_session([CONNECT, ev(1100, "tools/list"), LIST, READ_1])
    assert not any("tools/list" in note for note in score.notes), score.notes


def test_a_listen_for_list_changes_only_never_asked_for_the_resource() -> None:
    listen = ev(1100, "subscriptions/listen")  # no resourceSubscriptions: no uri
    score = score_session([CONNECT, listen, LIST])
    assert score.level == 2
    assert "listen asked only for list-changed events, never for the resource" in score.notes
    other = ev(1100, "subscriptions/listen", uri="test://other")
    assert "listen named other resources, never test://review/status" in (
        score_session([CONNECT, other]).notes
    )


def test_a_stream_that_closes_right_after_a_priming_event_broke_on_it() -> None:
    events = [
        CONNECT,
        _stream(1010, "stream/open"),
        _stream(1011, "stream/priming", "out"),
        _stream(1040, "stream/close"),
        LIST,
    ]
    score = score_session(events)
    assert score.level == 2
    assert (
        "stream broke after a data-less event: the GET stream closed 29 ms after a priming "
        "event, before any notification" in score.notes
    )
    assert not any("never opened a GET stream" in note for note in score.notes)


def test_a_stream_that_stays_open_long_after_priming_did_not_break() -> None:
    events = [
        CONNECT,
        _stream(1010, "stream/open"),
        _stream(1011, "stream/priming", "out"),
        _stream(9000, "stream/close"),
    ]
    assert not any("broke" in note for note in score_session(events).notes)


def test_a_stream_closed_after_the_client_went_on_working_did_not_break() -> None:
    # Claude Code in -p mode: it reads twice over the open stream, then exits, all
    # within a second of the priming event. The close is the end of its run.
    events = [
        CONNECT,
        _stream(1010, "stream/open"),
        _stream(1011, "stream/priming", "out"),
        READ_1,
        ev(1300, "resources/read", uri=STATUS_URI, version=2),
        _stream(1470, "stream/close"),
    ]
    assert not any("broke" in note for note in score_session(events).notes)


def test_never_opening_a_get_stream_is_noted() -> None:
    score = score_session([CONNECT, LIST, READ_1])
    assert score.level == 3
    assert "never opened a GET stream" in score.notes
    assert "read the resource but never subscribed" in score.notes
    resumed = _stream(1010, "stream/resume")
    assert (
        "never opened a GET stream for notifications (only GETs resuming a POST response stream)"
        in score_session([CONNECT, resumed]).notes
    )


def test_a_failed_subscribe_is_named() -> None:
    failed = ev(1300, "resources/subscribe", uri=STATUS_URI, error=-32603)
    score = score_session([CONNECT, _stream(1010, "stream/open"), LIST, READ_1, failed])
    assert score.level == 3
    assert "resources/subscribe failed with error -32603" in score.notes


@pytest.mark.parametrize("level_events", [1, 2, 3])
def test_every_stop_at_levels_1_to_3_has_a_reason(level_events: int) -> None:
    flow = [CONNECT, LIST, READ_1][:level_events]
    score = score_session(flow)
    assert score.level == level_events
    reasons = ("never sent resources/subscribe", "never subscribed")
    assert any(r in note for note in score.notes for r in reasons), score.notes
