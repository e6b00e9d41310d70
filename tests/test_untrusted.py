"""Client-chosen values (services/mcp_lab/untrusted.py): cut to their limits, escaped where they
are shown (log lines, the table and markdown reports), unambiguous where they are keys."""

from __future__ import annotations

import io
import logging

from mcp_lab import untrusted
from mcp_lab.contract import Event
from mcp_lab.evidence import levels, report, scoring
from mcp_lab.evidence.build import Report
from mcp_lab.logs import setup_logging
from mcp_lab.scenarios import registry
from mcp_lab.server.peers import modern_key

FORGED = "evil\n[resources/subscribe] uri=test://review/status session=x client=claude-code/1.2.3"


def made(clients: list[levels.ClientScore]) -> Report:
    return Report("0-0", None, registry.get("single"), clients, 0, 0)


def test_escape_makes_every_control_character_visible_and_keeps_text() -> None:
    assert untrusted.escape("plain text/1.0 é") == "plain text/1.0 é"
    assert untrusted.escape("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert untrusted.escape("\x1b[31mred\x1b]0;title\x07") == "\\x1b[31mred\\x1b]0;title\\x07"
    assert untrusted.escape("x\u2028y\u202ez\x85") == "x\\u2028y\\u202ez\\x85"
    assert untrusted.escape("back\\slash") == "back\\\\slash"  # unambiguous: \n is never a newline


def test_cut_bounds_a_value_and_says_how_long_it_was() -> None:
    assert untrusted.cut("short", 10) == "short"
    cut = untrusted.cut("n" * 1_000_000, 128)
    assert cut.startswith("n" * 128) and cut.endswith("...(1000000 chars)")
    assert len(cut) < 128 + 24


def test_modern_keys_escape_their_parts() -> None:
    assert modern_key("modern-client", "1.0") == "modern:modern-client/1.0"
    assert modern_key("a/b", "c") != modern_key("a", "b/c")
    assert modern_key("a%2Fb", "c") != modern_key("a/b", "c")


def events(name: str, version: str, method: str = "initialize") -> list[Event]:
    common = {
        "session": "s1",
        "client": name,
        "client_version": version,
        "protocol": "2025-11-25",
        "transport": "streamable-http",
        "direction": "in",
    }
    return [
        Event(ts_ms=1000, method="initialize", **common),
        Event(ts_ms=1100, method=method, error=-32601, **common),
    ]


def test_a_newline_in_a_client_value_never_starts_a_report_line() -> None:
    version = "1\n## claude-code 9\n- Calls resources/list? yes"
    clients = scoring.score_clients(events(FORGED, version))
    table, markdown = report.to_table(made(clients)), report.to_markdown(made(clients))
    for text in (table, markdown):
        lines = text.splitlines()
        assert not any(line.startswith("[resources/subscribe]") for line in lines), text
        assert not any(line.startswith("- Calls resources/list? yes") for line in lines), text
        assert sum(line.startswith("## ") for line in lines) <= 1, text
    assert "evil\\n[resources/subscribe]" in table
    # In markdown source the escape's backslash and the bracket are escaped once more.
    assert "## evil\\\\n\\[resources/subscribe\\]" in markdown


def test_the_markdown_report_escapes_html_and_markdown() -> None:
    clients = scoring.score_clients(events("<img src=x onerror=alert(1)>", "[v](http://e.x)"))
    text = report.to_markdown(made(clients))
    assert "<img" not in text and "&lt;img" in text
    assert "[v](http" not in text


def test_a_megabyte_name_keeps_the_reports_small() -> None:
    clients = scoring.score_clients(events("n" * 1_000_000, "v" * 100_000, "m" * 100_000))
    assert len(report.to_table(made(clients))) < 4_000
    assert len(report.to_markdown(made(clients))) < 4_000


def test_every_log_line_is_one_line(capsys) -> None:
    stream = io.StringIO()
    setup_logging("INFO")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    logging.getLogger("some.library").warning("bad input %s", "a\nb\x1b[2J")
    logging.getLogger("mcp_lab.test").info("value %s", "x" * 100_000)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("bad input a\\nb\\x1b[2J")
    assert len(lines[1]) < 10_000


def test_the_clients_matrix_in_markdown_keeps_a_clients_words_in_their_cell() -> None:
    from mcp_lab.runners.clients.matrix import CLIENT_MATRIX, ClientRow

    row = ClientRow("x", "1", "single", "no tool", notes=[f"sent clientInfo {FORGED} <b>x</b> | y"])
    lines = CLIENT_MATRIX.markdown([row]).splitlines()
    assert len(lines) == 3  # the header, its rule, one row: no line of the client's own
    assert "<b>" not in lines[2] and "&lt;b&gt;" in lines[2] and "\\| y" in lines[2]
