"""The terminal table `mcp-lab report` draws from a served report's JSON."""

from __future__ import annotations

from mcp_lab.cli.served_report import to_table


def test_the_reports_own_notes_come_before_the_clients() -> None:
    data = {
        "window": "run 1-0",
        "scenario": {"name": "single"},
        "missing_events": 2,
        "left_out": {"notes": ["1 session begun before this run left out: old/1.0"]},
        "clients": [],
    }
    table = to_table(data).splitlines()
    assert table[0] == "run 1-0, 0 client(s), scenario single"
    assert table[1] == "note: 2 event(s) of this window could not be recorded"
    assert table[2] == "note: 1 session begun before this run left out: old/1.0"
    assert table[-1] == "no client has connected in this window"
