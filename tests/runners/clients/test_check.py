"""``mcp-lab check``'s verdicts and renderings: the checklist as booleans, the exit code,
JUnit with a test case per item (failed when the expected level needs it, skipped past
it)."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from mcp_lab.runners.clients.check import (
    EXIT_BELOW,
    EXIT_PASSED,
    Verdict,
    exit_code,
    to_json,
    to_junit,
    to_table,
)
from mcp_lab.runners.clients.matrix import Check, ClientRow
from tests.support.lab import ROOT

DONE = ["connected", "listed", "read", "subscribed", "notified", "re_read"]


def row(level: int) -> ClientRow:
    made = ClientRow("command", "local", "single", "no tool", transport="http", level=level,
               server_level=level, client_info="ideal-client/1.0")  # fmt: skip
    made.checklist = {box: Check("yes" if i < level else "no", 1.0) for i, box in enumerate(DONE)}
    made.checklist["reflected"] = Check("n/a")
    made.notes = ["whether the new content reached the model (level 7) is not visible here"]
    return made


def test_a_level_at_or_above_the_expected_one_passes() -> None:
    assert exit_code([Verdict(row(6), 6)]) == EXIT_PASSED
    assert exit_code([Verdict(row(6), 7)]) == EXIT_BELOW
    assert exit_code([Verdict(row(6), 6), Verdict(row(4), 6)]) == EXIT_BELOW
    assert exit_code([]) == EXIT_BELOW  # nothing checked is no pass
    verdict = Verdict(row(4), 6)
    assert verdict.checklist == {
        "connected": True, "listed": True, "read": True, "subscribed": True,
        "notified": False, "re_read": False, "reflected": False,
    }  # fmt: skip


def test_junit_has_a_case_per_item_failed_up_to_the_level_asked_and_skipped_beyond() -> None:
    suites = ET.fromstring(to_junit([Verdict(row(4), 5)]))
    (suite,) = suites
    cases = {case.get("name"): case for case in suite}
    assert list(cases) == ["1 connect", "2 list", "3 read v1", "4 subscribe", "5 notified",
                           "6 re-read", "level at least 5"]  # fmt: skip
    assert cases["4 subscribe"].find("failure") is None
    assert cases["5 notified"].find("failure") is not None
    assert cases["6 re-read"].find("skipped") is not None
    assert cases["level at least 5"].find("failure").get("message") == "level 4 < 5"
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("7", "2", "1")


def test_the_table_and_json_say_the_same() -> None:
    verdicts = [Verdict(row(6), 7)]
    data = json.loads(to_json(verdicts))
    assert data["passed"] is False
    (one,) = data["verdicts"]
    assert (one["level"], one["expect"], one["client_info"]) == (6, 7, "ideal-client/1.0")
    table = to_table(verdicts)
    assert table.startswith("FAIL  ideal-client/1.0 in single over http: level 6 re-read")
    assert "[x] re-read" in table and "reflected" not in table  # no model: not shown


def test_the_own_client_doc_shows_the_examples_as_they_are() -> None:
    """docs/own-client.md quotes docs/examples: every line of its Python, JavaScript and
    the example client file's blocks is in the file it quotes."""
    docs = ROOT / "docs"
    text = (docs / "own-client.md").read_text()
    quoted = {"python": ["ideal_client.py", "test_own_client.py"], "js": ["ideal_client.mjs"]}
    for language, files in quoted.items():
        source = "".join((docs / "examples" / name).read_text() for name in files)
        for block in text.split(f"```{language}\n")[1:]:
            for line in block.split("```")[0].splitlines():
                assert line in source, (language, line)
    client_file = (docs / "examples" / "ideal-client.toml").read_text()
    first_toml = text.split("```toml\n")[1].split("```")[0]
    assert all(line in client_file for line in first_toml.splitlines())


def test_what_a_client_chose_is_one_line_in_the_table_and_valid_in_junit() -> None:
    made = row(3)
    made.client_info = "evil\x1b[2J\nPASS  forged/1.0"
    made.notes.append("sent clientInfo \x07boom\nPASS  forged")
    verdicts = [Verdict(made, 6)]
    table = to_table(verdicts)
    assert "\x1b" not in table and "\x07" not in table
    assert not any(line.startswith("PASS") for line in table.splitlines())
    ET.fromstring(to_junit(verdicts))  # parses: no raw control character in the XML


def test_junit_parses_whatever_characters_a_client_printed() -> None:
    """U+FFFE, U+FFFF and a lone surrogate in a note and in the client's name (XML 1.0
    holds none of them, not even as a reference) are written as escapes: the file parses."""
    made = row(3)
    made.client = "evil\uffff"
    made.notes.append("printed \ufffe\uffff\ud800 and \x0b")
    suites = ET.fromstring(to_junit([Verdict(made, 6)]))
    suite = suites[0]
    assert suite.get("name", "").startswith("evil\\uffff ")
    text = "".join(node.text or "" for node in suite.iter("failure"))
    assert "printed \\ufffe\\uffff\\ud800" in text


def test_a_row_that_never_ran_answers_no_box_in_the_json() -> None:
    """A client that never ran (its install failed): each box is null, not false."""
    made = row(3)
    made.level, made.runner_failed, made.checklist = None, "install failed: no binary", {}
    boxes = json.loads(to_json([Verdict(made, 6)]))["verdicts"][0]["checklist"]
    assert boxes and set(boxes.values()) == {None}, boxes
    assert json.loads(to_json([Verdict(row(3), 6)]))["verdicts"][0]["checklist"]["read"] is True
