"""The one SSE encoder: the framings the lab, the dashboard and the scripted model write."""

from __future__ import annotations

from mcp_lab.sse import frame


def test_a_message_event_is_framed_as_the_sdk_frames_it() -> None:
    assert frame('{"a":1}', event="message", event_id="1-0") == (
        b'event: message\nid: 1-0\ndata: {"a":1}\n\n'
    )


def test_a_priming_event_has_an_id_a_retry_and_an_empty_data_line() -> None:
    assert frame("", event="message", event_id="7-0", retry_ms=1500) == (
        b"event: message\nid: 7-0\nretry: 1500\ndata: \n\n"
    )


def test_lines_of_data_comments_and_a_bare_retry() -> None:
    assert frame("one\ntwo") == b"data: one\ndata: two\n\n"
    assert frame(comment="keepalive") == b": keepalive\n\n"
    assert frame(retry_ms=1000) == b"retry: 1000\n\n"
