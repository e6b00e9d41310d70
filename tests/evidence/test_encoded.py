"""A report encoded once (services/mcp_lab/evidence/encoded.py): the JSON ``JSONResponse``
would write, framed as one server-sent event, each session found by its label."""

from __future__ import annotations

import json

from starlette.responses import JSONResponse

from mcp_lab.evidence.encoded import encode

WIDE = "\U0001f600"


def session(label: str, method: str) -> dict:
    return {
        "session": label,
        "level": 3,
        "checkpoints": {"initialized": "2026-01-01T00:00:00.000Z"},
        "events": [{"method": method, "uri": f"test://{WIDE}\u2028", "error": None}],
        "notes": ["a\nnote"],
    }


REPORT = {
    "run": {"id": "1767225600000-0", "started": "2026-01-01T00:00:00.000Z"},
    "window": "run 1767225600000-0",
    "levels": {"0": "none"},
    "clients": [
        {
            "client": f"one{WIDE}",
            "version": "1.0",
            "best_session": "aaaaaaaaaa",
            "sessions": [session("aaaaaaaaaa", "initialize"), session("bbbbbbbbbb", "ping")],
        },
        {"client": "two", "version": "2.0", "sessions": [session("aaaaaaaaaa", "other")]},
    ],
}


def test_the_encoding_is_the_json_a_json_response_writes_as_one_event() -> None:
    encoded = encode(REPORT)
    assert bytes(encoded.json) == JSONResponse(REPORT).body
    assert encoded.event == b"event: report\ndata: " + bytes(encoded.json) + b"\n\n"
    assert encoded.event.count(b"\n") == 3  # one data line: compact JSON breaks no line
    assert encoded.run == "1767225600000-0"


def test_each_session_is_read_from_its_place_alone() -> None:
    encoded = encode(REPORT)
    assert encoded.session("bbbbbbbbbb") == (session("bbbbbbbbbb", "ping"), f"one{WIDE}", "1.0")
    # A label twice (one id under two clients' names): the first, as the page finds it.
    assert encoded.session("aaaaaaaaaa") == (
        session("aaaaaaaaaa", "initialize"),
        f"one{WIDE}",
        "1.0",
    )
    assert encoded.session("cccccccccc") is None
    assert json.loads(bytes(encoded.json)) == REPORT


def test_a_report_of_a_time_window_has_no_run() -> None:
    assert encode({"run": None, "since": "2026-01-01T00:00:00.000Z", "clients": []}).run is None
