"""The clients matrix's history: what ``mcp-lab clients run`` keeps, across runs, and how
``mcp-lab clients history`` marks each change. The runner is stood in for (its rows are
made here): ``tests/system/test_sweep.py`` keeps rows of a real client program."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mcp_lab.cli.main import main
from mcp_lab.runners.clients import runner
from mcp_lab.runners.clients.definition import ClientDef
from mcp_lab.runners.clients.history import CLIENT_HISTORY, RUN, SWEEP
from mcp_lab.runners.clients.matrix import CHECKLIST, Check, ClientRow
from mcp_lab.runners.history_store import HISTORY_ENV

BOXES = list(CHECKLIST)


def row(version: str, level: int, answers: dict[str, str], setup: str = "no tool") -> ClientRow:
    made = ClientRow("inspector", version, "single", setup, protocol="2025-11-25", level=level)
    made.server_level = level
    made.checklist = {key: Check(answers.get(key, "no"), 1.0) for key in BOXES}
    made.checks = [{"key": "k", "title": "templates listed", "answer": "no", "at_s": None}]
    made.notes = [f"a note of {version}"]
    made.runs = {"scored": f"/runs/inspector-{version}/single/no-tool/scored"}
    return made


OLD = {"connected": "yes", "read": "yes"}
NEW = {"connected": "yes", "read": "yes", "subscribed": "yes", "notified": "yes"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``clients run``'s folder for its runs goes under the test's own directory."""
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(tmp_path / "clients"))


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The history in the test's own data directory (the default place, under it)."""
    monkeypatch.delenv(HISTORY_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data" / "mcp-lab" / "history.sqlite3"


def clients_run(monkeypatch: pytest.MonkeyPatch, rows: list[ClientRow]) -> None:
    """``mcp-lab clients run --client inspector``, its runner giving ``rows``."""

    async def made(*_: object, **__: object) -> list[ClientRow]:
        return rows

    monkeypatch.setattr(runner, "run_clients", made)
    with pytest.raises(SystemExit) as exit_code:
        main(["clients", "run", "--client", "inspector", "--quiet", "--format", "json"])
    assert exit_code.value.code == 0


def test_every_clients_run_is_kept_and_each_change_is_marked(
    kept: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clients_run(monkeypatch, [row("2.12.0", 3, OLD)])
    clients_run(monkeypatch, [row("2.12.0", 3, OLD)])  # the same verdict again
    clients_run(monkeypatch, [row("2.13.0", 5, NEW)])
    capsys.readouterr()
    # Three runs, three rows in the file, each with its date, lab version and folder.
    with sqlite3.connect(kept) as db:
        stored = db.execute("SELECT version, level, source, lab_version, runs FROM verdicts")
        rows = stored.fetchall()
    assert [(v, lv, src) for v, lv, src, _, _ in rows] == [
        ("2.12.0", 3, "run"),
        ("2.12.0", 3, "run"),
        ("2.13.0", 5, "run"),
    ]
    assert all(lab != "" for _, _, _, lab, _ in rows)
    assert json.loads(rows[2][4]) == {"scored": "/runs/inspector-2.13.0/single/no-tool/scored"}

    with pytest.raises(SystemExit):
        main(["clients", "history", "--client", "inspector"])
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert lines[:2] == ["inspector", "  single (no tool, http)"]
    first, second = lines[2], lines[3]
    assert "2.12.0" in first and "(+1 more to" in first and "level 3 read initial" in first
    assert "connect yes" in first and "templates listed no" in first
    assert "2.13.0" in second
    assert second.endswith(
        "CHANGED 2.13.0: level 3 -> 5; subscribed: no -> yes; notified: no -> yes"
    ), second
    assert str(kept) in table

    with pytest.raises(SystemExit):
        main(["clients", "history", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    (cell,) = data["clients"][0]["cells"]
    assert cell["latest"]["version"] == "2.13.0" and cell["latest"]["level"] == 5
    assert [e["runs_kept"] for e in cell["entries"]] == [2, 1]
    assert [c["text"] for c in cell["changes"]] == [
        "2.13.0: level 3 -> 5; subscribed: no -> yes; notified: no -> yes"
    ]


def test_versions_are_ordered_as_versions_and_a_runner_failure_is_no_change(
    tmp_path: Path,
) -> None:
    where = tmp_path / "h.sqlite3"
    failed = row("2.10.0", 3, OLD).fail("install failed: no network")
    # Kept out of order (a sweep runs versions in any order): 2.9.0 comes before 2.10.0.
    CLIENT_HISTORY.record([row("2.10.0", 5, NEW)], SWEEP, path=where, when="2026-12-02T10:00:00Z")
    CLIENT_HISTORY.record([row("2.9.0", 3, OLD)], SWEEP, path=where, when="2026-12-03T10:00:00Z")
    CLIENT_HISTORY.record([failed], RUN, path=where, when="2026-12-04T10:00:00Z")
    (cell,) = CLIENT_HISTORY.cells(CLIENT_HISTORY.read(where))
    assert [(e.version, e.level) for e in cell.entries] == [
        ("2.9.0", 3),
        ("2.10.0", 5),
        ("2.10.0", None),
    ]
    changes = [None if c is None else c.text() for c in cell.changes]
    assert changes == [
        None,
        "2.10.0: level 3 -> 5; subscribed: no -> yes; notified: no -> yes",
        None,
    ]
    assert cell.latest.level == 5  # the failure says nothing of the client
    table = CLIENT_HISTORY.to_table([cell], where)
    assert "level - runner failed  (install failed: no network)" in table


def test_no_history_yet_is_said_and_the_dashboards_matrix_is_empty(kept: Path) -> None:
    assert CLIENT_HISTORY.read() == []
    assert CLIENT_HISTORY.matrix() == {"scenarios": [], "clients": []}
    assert "no clients run kept yet" in CLIENT_HISTORY.to_table([], kept)


def test_the_table_escapes_what_a_client_printed(tmp_path: Path) -> None:
    """Notes and failures carry a CLI's own output; a terminal reads the table."""
    where = tmp_path / "h.sqlite3"
    forged = "boom\x1b]0;owned\x07\n    2099-01-01 forged line"
    CLIENT_HISTORY.record([row("1.0.0\x1b[2J", 3, OLD).fail(forged)], RUN, path=where)
    table = CLIENT_HISTORY.to_table(CLIENT_HISTORY.cells(CLIENT_HISTORY.read(where)), where)
    assert "\x1b" not in table and "\x07" not in table, table
    assert "forged line" in table and "\n    2099-01-01" not in table, table
    assert "1.0.0\\x1b[2J" in table, table


def test_the_history_command_cuts_what_a_client_chose(
    kept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 5,001-character name (a definition file chose it) and version (its CLI printed
    it) print cut to a report's cell, and the verdict's text to a note, as the other
    reports cut them."""
    named = row("9" * 5_001, 3, OLD)
    named.client = "n" * 5_001
    named.checks = [{"key": "k", "title": "t" * 5_001, "answer": "no", "at_s": None}]
    CLIENT_HISTORY.record([named], RUN, path=kept)
    with pytest.raises(SystemExit):
        main(["clients", "history"])
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert lines[0] == "n" * 60 + "...(5001 chars)"
    assert "9" * 60 + "...(5001 chars)" in lines[2] and "9" * 61 not in table
    assert lines[2].endswith("...(5101 chars)") and "t" * 100 in lines[2]
    assert "t" * 300 not in table
    assert max(len(line) for line in lines) < 500, max(len(line) for line in lines)


def test_a_client_named_twice_runs_once(kept: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Named twice, a client would run twice at once into the same run folders."""
    asked: list[list[str]] = []

    async def made(clients: list[ClientDef], *_: object, **__: object) -> list[ClientRow]:
        asked.append([client.name for client in clients])
        return [row("1.0.0", 3, OLD)]

    monkeypatch.setattr(runner, "run_clients", made)
    with pytest.raises(SystemExit) as exit_code:
        main(["clients", "run", "--client", "inspector", "--client", "inspector", "--quiet"])
    assert exit_code.value.code == 0
    assert asked == [["inspector"]]


def _strings(value: object) -> list[str]:
    """Every string of a JSON value, its keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in _strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def test_the_history_json_cuts_what_a_client_chose_like_the_table(
    kept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``clients history --format json`` and the dashboard's ``/api/matrix`` carry a
    5,001-character name and version cut to a report's cell, and a note and a check's
    title to a note, as the table prints them (they were whole)."""
    named = row("9" * 5_001, 3, OLD)
    named.client = "n" * 5_001
    named.notes = ["x" * 50_000]
    named.checks = [{"key": "k", "title": "t" * 5_001, "answer": "no", "at_s": None}]
    CLIENT_HISTORY.record([named], RUN, path=kept)
    with pytest.raises(SystemExit):
        main(["clients", "history", "--format", "json"])
    printed = json.loads(capsys.readouterr().out)
    for data in (printed, CLIENT_HISTORY.matrix(kept)):
        strings = _strings(data)
        (program,) = data["clients"]
        assert program["client"] == "n" * 60 + "...(5001 chars)"
        assert program["cells"][0]["latest"]["version"] == "9" * 60 + "...(5001 chars)"
        assert program["cells"][0]["latest"]["notes"] == ["x" * 300 + "...(50000 chars)"]
        assert max(len(s) for s in strings if s != printed.get("database")) < 400
    assert printed["database"] == str(kept)


def test_a_row_that_does_not_parse_is_skipped_with_one_line(
    kept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose notes are no JSON (another program wrote it, or the disk's damage):
    ``clients history`` shows the other rows and says in one line what it skipped (it
    crashed with a JSONDecodeError traceback)."""
    CLIENT_HISTORY.record([row("1.0.0", 3, OLD)], RUN, path=kept, when="2026-12-01T10:00:00Z")
    CLIENT_HISTORY.record([row("2.0.0", 5, NEW)], RUN, path=kept, when="2026-12-02T10:00:00Z")
    with sqlite3.connect(kept) as db:
        db.execute("UPDATE verdicts SET notes = '{not json' WHERE version = '1.0.0'")
    with pytest.raises(SystemExit) as exit_code:
        main(["clients", "history"])
    assert exit_code.value.code == 0
    out, err = capsys.readouterr()
    assert "2.0.0" in out and "1.0.0" not in out
    (line,) = err.splitlines()
    assert line.startswith("mcp-lab: skipped 1 client row(s) of ") and "JSONDecodeError" in line
    assert "2026-12-01T10:00:00Z" in line


def test_a_file_of_schema_3_keeps_its_transport_and_reads_no_client_info(kept: Path) -> None:
    """A history an older lab wrote (schema 3: transport, no client_info): its stdio row
    reads as stdio, its clientInfo as unknown; a newer write upgrades it in place."""
    from mcp_lab.runners import history_store

    kept.parent.mkdir(parents=True)
    with sqlite3.connect(kept) as db:
        db.executescript(history_store._CLIENTS)
        history_store._transport(db)
        db.execute("PRAGMA user_version = 3")
        db.execute(
            "INSERT INTO verdicts (recorded, lab_version, source, client, version, scenario, "
            "setup, protocol, level, server_level, answers, checks, notes, runs, "
            "runner_failed, transport) VALUES ('2026-12-01T10:00:00Z', '0.1', 'run', "
            "'inspector', '1.0.0', 'single', 'no tool', '2025-11-25', 3, 3, '{}', '[]', "
            "'[]', '{}', NULL, 'stdio')"
        )
    (old,) = CLIENT_HISTORY.read(kept)
    assert (old.transport, old.client_info) == ("stdio", "")
    made = row("2.0.0", 5, NEW)
    made.client_info = "inspector-cli/2.0.0"
    CLIENT_HISTORY.record([made], RUN, path=kept)
    first, second = CLIENT_HISTORY.read(kept)
    assert (first.transport, first.client_info) == ("stdio", "")
    assert second.client_info == "inspector-cli/2.0.0"


def test_a_run_whose_rows_could_not_be_kept_exits_1_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The history's file cannot be written (its path is a folder): the matrix is still
    printed, and the run exits 1 saying why (it exited 0)."""
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path))

    async def made(*_: object, **__: object) -> list[ClientRow]:
        return [row("1.0.0", 3, OLD)]

    monkeypatch.setattr(runner, "run_clients", made)
    with pytest.raises(SystemExit) as exit_code:
        main(["clients", "run", "--client", "inspector", "--quiet", "--format", "json"])
    out, err = capsys.readouterr()
    assert exit_code.value.code == 1, err
    assert json.loads(out)["clients"][0]["version"] == "1.0.0"
    assert "the history could not be written" in err
    assert "exit code 1: the rows above were not kept in the history" in err
