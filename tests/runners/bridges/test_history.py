"""The bridges matrix's history: what ``mcp-lab bridges run`` keeps, across runs, how
``mcp-lab bridges history`` marks each change, and a history file of the schema before
the bridges' upgraded. The runner is stood in for (its rows are made here, as
services/mcp_lab/runners/bridges/verdict.py makes them): no bridge is installed or run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mcp_lab.cli.main import main
from mcp_lab.runners.bridges import runner
from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
from mcp_lab.runners.bridges.verdict import (
    DROPPED,
    NOT_APPLICABLE,
    NOT_REACHED,
    PASSED,
    STEPS,
    BridgeRow,
    StepCell,
)
from mcp_lab.runners.clients.history import CLIENT_HISTORY
from mcp_lab.runners.clients.matrix import Check, ClientRow
from mcp_lab.runners.history_store import HISTORY_ENV, SCHEMA_VERSION

WAY = "stdio->HTTP"


def row(version: str, through: bool, scenario: str = "single") -> BridgeRow:
    """supergateway's row in ``single``: notifications lost (``through`` False, as at
    its pin) or passed."""
    made = BridgeRow("supergateway", version, WAY, scenario, client_protocol="2025-11-25",
               lab_protocol="2025-11-25", lab_level=6 if through else 5)  # fmt: skip
    for key in STEPS:
        made.steps[key] = StepCell(PASSED)
    made.steps["initialize"] = StepCell(PASSED, "resources capability {'subscribe': True}")
    made.steps["list_changed"] = StepCell(NOT_APPLICABLE)
    if through:
        made.steps["notified"] = StepCell(PASSED, "after the lab sent it: [9] ms", "1/1", 9)
        made.steps["re_read"] = StepCell(PASSED, "", "1/1")
    else:
        lost = "the lab delivered 1 to the bridge on an open stream; 1 never reached the client"
        made.steps["notified"] = StepCell(DROPPED, lost, "0/1")
        made.steps["re_read"] = StepCell(NOT_REACHED, "no notification reached the client", "0/1")
        made.steps["resume"] = StepCell(NOT_REACHED, "no notification passes this bridge")
        made.notes = [f"notified: dropped: {lost}"]
    made.runs = {scenario: f"/cache/bridges/runs/supergateway-{version}/{WAY}/{scenario}"}
    made.seconds = 4.2
    return made


def bridges_run(monkeypatch: pytest.MonkeyPatch, rows: list[BridgeRow], code: int = 0) -> None:
    """``mcp-lab bridges run --bridge supergateway``, its runner giving ``rows``; it
    exits with ``code``."""

    async def made(*_: object, **__: object) -> list[BridgeRow]:
        return rows

    monkeypatch.setattr(runner, "run_bridges", made)
    with pytest.raises(SystemExit) as exit_code:
        main(["bridges", "run", "--bridge", "supergateway", "--quiet", "--format", "json"])
    assert exit_code.value.code == code


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``bridges run``'s folder for its runs goes under the test's own directory."""
    monkeypatch.setenv("MCP_LAB_BRIDGES_CACHE", str(tmp_path / "bridges"))


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "history.sqlite3"
    monkeypatch.setenv(HISTORY_ENV, str(where))
    return where


CHANGE = (
    "0.16.0: notified passed 1/1 (was dropped 0/1); re-read passed 1/1 (was not reached 0/1); "
    "resume passed (was not reached); lab level 6 (was 5)"
)


def test_every_bridges_run_is_kept_and_each_change_is_marked(
    kept: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bridges_run(monkeypatch, [row("4.0.0", through=False)])
    bridges_run(monkeypatch, [row("4.0.0", through=False)])  # the same marks again
    bridges_run(monkeypatch, [row("0.16.0", through=True)])  # an older version, run later
    capsys.readouterr()
    with sqlite3.connect(kept) as db:
        stored = db.execute(
            "SELECT recorded, lab_version, bridge, version, direction, scenario, steps, notes, "
            "runs FROM bridge_verdicts ORDER BY id"
        ).fetchall()
        assert db.execute("SELECT count(*) FROM verdicts").fetchone() == (0,)  # no client's
    assert [r[2:6] for r in stored] == [("supergateway", v, WAY, "single")
                                        for v in ("4.0.0", "4.0.0", "0.16.0")]  # fmt: skip
    recorded, lab, *_, steps, notes, runs = stored[0]
    assert recorded.endswith("Z") and lab != ""
    assert json.loads(steps)["notified"] == {
        "mark": DROPPED,
        "detail": "the lab delivered 1 to the bridge on an open stream; 1 never reached the client",
        "count": "0/1",
        "late_ms": None,
    }
    assert json.loads(notes)[0].startswith("notified: dropped: the lab delivered 1")
    assert json.loads(runs) == {"single": f"/cache/bridges/runs/supergateway-4.0.0/{WAY}/single"}

    # Versions are ordered as versions: 0.16.0 comes first, 4.0.0's marks are its change.
    main_exit(["bridges", "history", "--bridge", "supergateway"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["supergateway", f"  {WAY} (single)"]
    first, second = lines[2], lines[3]
    assert "0.16.0" in first and "notified passed 1/1" in first and "lab level 6" in first
    assert "list_changed" not in first  # not part of single
    assert "4.0.0" in second and "(+1 more to" in second
    assert second.endswith(
        "CHANGED 4.0.0: notified dropped 0/1 (was passed 1/1); re-read not reached 0/1 (was "
        "passed 1/1); resume not reached (was passed); lab level 5 (was 6)"
    ), second
    assert lines[-1] == f"kept in {kept}"


def test_a_newer_version_that_lets_notifications_through_is_marked(
    kept: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    BRIDGE_HISTORY.record([row("0.15.1", False)], when="2026-12-01T10:00:00Z")
    BRIDGE_HISTORY.record([row("0.16.0", True)], when="2026-12-02T10:00:00Z")
    BRIDGE_HISTORY.record([row("0.16.0", True, "repeated")], when="2026-12-02T10:00:00Z")
    main_exit(["bridges", "history", "--scenario", "single", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert data["database"] == str(kept)
    ((bridge, cells),) = [(b["bridge"], b["cells"]) for b in data["bridges"]]
    (cell,) = cells  # only single
    assert (bridge, cell["direction"], cell["scenario"]) == ("supergateway", WAY, "single")
    assert cell["latest"]["version"] == "0.16.0"
    assert cell["latest"]["marks"]["notified"] == PASSED
    assert cell["latest"]["steps"]["notified"]["late_ms"] == 9
    assert [e["version"] for e in cell["entries"]] == ["0.15.1", "0.16.0"]
    assert [c["text"] for c in cell["changes"]] == [CHANGE]
    assert cell["entries"][1]["change"]["fields"][0] == {
        "key": "notified", "before": "dropped 0/1", "after": "passed 1/1",
    }  # fmt: skip

    main_exit(["bridges", "history", "--bridge", "mcp-remote"])
    assert capsys.readouterr().out.startswith("nothing kept for bridge mcp-remote in ")


def test_a_runner_failure_is_kept_and_is_no_change(tmp_path: Path) -> None:
    where = tmp_path / "h.sqlite3"
    failed = BridgeRow("supergateway", "0.17.0", WAY, "single").fail("install failed: no network")
    BRIDGE_HISTORY.record([row("0.16.0", True)], path=where, when="2026-12-01T10:00:00Z")
    BRIDGE_HISTORY.record([failed], path=where, when="2026-12-02T10:00:00Z")
    (cell,) = BRIDGE_HISTORY.cells(BRIDGE_HISTORY.read(where))
    assert [(e.version, e.failed) for e in cell.entries] == [("0.16.0", False), ("0.17.0", True)]
    assert cell.changes == [None, None]
    assert cell.latest.version == "0.16.0"  # the failure says nothing of the bridge
    table = BRIDGE_HISTORY.to_table([cell], where)
    assert "0.17.0      lab" in table and "runner failed (install failed: no network)" in table


# The schema of the history file before the bridges had a table of their own (version 1).
_V1 = """
CREATE TABLE verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, recorded TEXT NOT NULL, lab_version TEXT NOT NULL,
    source TEXT NOT NULL, client TEXT NOT NULL, version TEXT NOT NULL, scenario TEXT NOT NULL,
    setup TEXT NOT NULL, protocol TEXT NOT NULL, level INTEGER, server_level INTEGER,
    answers TEXT NOT NULL, checks TEXT NOT NULL, notes TEXT NOT NULL, runs TEXT NOT NULL,
    runner_failed TEXT
);
CREATE INDEX verdicts_cell ON verdicts (client, scenario, setup);
PRAGMA user_version = 1;
INSERT INTO verdicts VALUES (1, '2026-11-30T09:00:00Z', '0.1.0', 'run', 'inspector', '2.12.0',
    'single', 'no tool', '2025-11-25', 3, 3, '{"read": "yes"}', '[]', '[]', '{}', NULL);
"""


def test_a_file_of_the_schema_before_is_read_then_upgraded(tmp_path: Path) -> None:
    where = tmp_path / "old.sqlite3"
    with sqlite3.connect(where) as db:
        db.executescript(_V1)
    # Read as it is (read-only: no bridges kept yet, the clients' row there).
    assert BRIDGE_HISTORY.read(where) == []
    assert BRIDGE_HISTORY.matrix(where)["bridges"] == []
    with sqlite3.connect(where) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (1,)
    # The first bridges run upgrades it; the clients' row stays and reads as before.
    BRIDGE_HISTORY.record([row("0.16.0", True)], path=where)
    with sqlite3.connect(where) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (4,)
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"verdicts", "bridge_verdicts"} <= tables
    (client,) = CLIENT_HISTORY.read(where)
    assert (client.client, client.version, client.level) == ("inspector", "2.12.0", 3)
    assert [e.version for e in BRIDGE_HISTORY.read(where)] == ["0.16.0"]
    # A lab of the schema before writes to it again (setting its version back to 1):
    # the next writer of either kind upgrades it again, nothing lost.
    with sqlite3.connect(where) as db:
        db.execute("PRAGMA user_version = 1")
    made = ClientRow("inspector", "2.13.0", "single", "no tool", level=5, server_level=5)
    made.checklist = {"read": Check("yes")}
    CLIENT_HISTORY.record([made], path=where)
    BRIDGE_HISTORY.record([row("0.16.0", True)], path=where)
    with sqlite3.connect(where) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (4,)
    assert [e.version for e in CLIENT_HISTORY.read(where)] == ["2.12.0", "2.13.0"]
    assert [e.transport for e in CLIENT_HISTORY.read(where)] == ["http", "http"]
    assert [e.count for e in BRIDGE_HISTORY.cells(BRIDGE_HISTORY.read(where))[0].entries] == [2]


def main_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main(argv)
    assert exit_code.value.code == 0


def test_a_history_that_cannot_be_written_is_said_and_the_run_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows are still printed; the exit code says they were not kept."""
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path))  # a directory, not a file
    bridges_run(monkeypatch, [row("0.16.0", True)], code=1)
    said = capsys.readouterr()
    assert json.loads(said.out)["bridges"][0]["version"] == "0.16.0"
    assert "mcp-lab bridges: the history could not be written:" in said.err
    assert "exit code 1: the rows above were not kept in the history" in said.err


def test_the_history_of_one_direction(kept: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = row("0.16.0", True)
    other.direction = "stdio->SSE"
    BRIDGE_HISTORY.record([row("0.15.1", False), other], path=kept, when="2026-12-01T10:00:00Z")

    def shown(*options: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exit_code:
            main(["bridges", "history", *options])
        out, err = capsys.readouterr()
        return int(exit_code.value.code or 0), out, err

    code, out, _ = shown("--direction", "stdio->SSE", "--format", "json")
    assert code == 0
    (bridge,) = json.loads(out)["bridges"]
    assert {c["direction"] for c in bridge["cells"]} == {"stdio->SSE"}
    code, out, _ = shown("--direction", "SSE->stdio")
    assert code == 0 and "nothing kept for direction SSE->stdio" in out
    code, _, err = shown("--direction", "sideways")
    assert code == 2 and "'sideways' is no direction" in err


@pytest.mark.process
def test_the_history_command_reads_the_file_it_is_pointed_at(
    kept: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    BRIDGE_HISTORY.record([row("0.15.1", False)], path=kept, when="2026-12-01T10:00:00Z")
    BRIDGE_HISTORY.record([row("0.16.0", True)], path=kept, when="2026-12-02T10:00:00Z")
    monkeypatch.setenv(HISTORY_ENV, str(kept))
    with pytest.raises(SystemExit) as done:
        main(["bridges", "history"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"CHANGED {CHANGE}" in out
    assert out.splitlines()[2].split()[:3] == ["2026-12-01", "10:00", "0.15.1"]
