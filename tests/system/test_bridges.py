"""Bridges and gateways between the reference client and a fresh lab:
``mcp-lab bridges run`` (services/mcp_lab/runners/bridges).

One run of the whole matrix (every bridge, every direction it supports, ``single``,
``repeated`` and ``list-changed``; runs side by side) is checked against the verdicts
docs/bridges.md documents, mark by mark, and against what each mark rests on (both
wires, the lab's evidence, the bridge's output kept in the run's folder). A bridge of
our own that drops ``notifications/resources/updated`` (tests/support/fake_bridge.py) must be
caught: the subscribe reached the lab, the lab delivered the notification, it never
reached the client; the same fake dropping nothing passes. The real bridges need npm
and the npm and PyPI registries: outside CI they skip without npm, with ``CI=true`` they
fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
from mcp_lab.runners.bridges.run import lab_faults
from mcp_lab.runners.bridges.runner import DEFAULT_SCENARIOS, run_bridge
from mcp_lab.runners.bridges.specs import (
    BRIDGES,
)
from mcp_lab.runners.bridges.verdict import (
    DROPPED,
    NOT_APPLICABLE,
    NOT_REACHED,
    PASSED,
    STEPS,
    BridgeRow,
)
from mcp_lab.scenarios import registry
from tests.support.fakes import FAKE_BRIDGE, bridge
from tests.support.lab import ROOT
from tests.support.shared_run import shared_run

pytestmark = [pytest.mark.clients, pytest.mark.timeout(900)]

MATRIX_TIMEOUT = 840  # under the tests' own 900 s; the first run also installs the bridges
DOC = ROOT / "docs" / "bridges.md"
# A row's marks, in the order of STEPS: P passed, D dropped, N not reached,
# R rewritten, - not part of this scenario or direction.
_LETTERS = {"P": PASSED, "D": DROPPED, "N": NOT_REACHED, "R": "rewritten", "-": NOT_APPLICABLE}
#                    initialize list read subscribe notified re-read unsubscribe list_changed resume
_THROUGH = {"single": "PPPPPPP-P", "repeated": "PPPPPPP--", "list-changed": "PPPP--PP-"}
_THROUGH_NO_RESUME = {s: marks[:-1] + "-" for s, marks in _THROUGH.items()}
# Subscribe passes, notifications do not (and so nothing after them).
_LOSES = {"single": "PPPPDNP-N", "repeated": "PPPPDNP--", "list-changed": "PPPP--PD-"}
_LOSES_REWRITTEN = {s: "R" + marks[1:] for s, marks in _LOSES.items()}
_LOSES_NO_RESUME = {s: marks[:-1] + "-" for s, marks in _LOSES_REWRITTEN.items()}
# The capability rewritten, subscribe refused by the bridge: nothing after it.
_REFUSES = {"single": "RPPDNNN-N", "repeated": "RPPDNNN--", "list-changed": "RPPD--NN-"}
_REFUSES_NO_RESUME = {s: marks[:-1] + "-" for s, marks in _REFUSES.items()}
EXPECTED: dict[tuple[str, str], dict[str, str]] = {
    ("mcp-remote", "stdio->HTTP"): _THROUGH,
    ("mcp-remote", "stdio->SSE"): _THROUGH_NO_RESUME,
    ("supergateway", "stdio->HTTP"): _LOSES,
    ("supergateway", "stdio->SSE"): {s: m[:-1] + "-" for s, m in _LOSES.items()},
    ("supergateway", "HTTP->stdio"): _THROUGH_NO_RESUME,
    ("supergateway", "SSE->stdio"): _THROUGH_NO_RESUME,
    # Stateless (no --stateful): a stdio server anew per POST, so the update has no session.
    ("supergateway-stateless", "HTTP->stdio"): {
        "single": "PPPPDNP--",
        "repeated": "PPPPDNP--",
        "list-changed": "PPPP--PD-",
    },
    ("mcp-proxy", "HTTP->stdio"): _THROUGH_NO_RESUME,
    ("mcp-proxy", "SSE->stdio"): _THROUGH_NO_RESUME,
    ("mcp-proxy-py", "stdio->HTTP"): _LOSES_REWRITTEN,
    ("mcp-proxy-py", "stdio->SSE"): _LOSES_NO_RESUME,
    ("mcp-proxy-py", "HTTP->stdio"): _LOSES_NO_RESUME,
    ("mcp-proxy-py", "SSE->stdio"): _LOSES_NO_RESUME,
    ("fastmcp-proxy", "stdio->HTTP"): _REFUSES,
    ("fastmcp-proxy", "HTTP->HTTP"): _REFUSES,
    ("fastmcp-proxy", "SSE->HTTP"): _REFUSES,
    ("fastmcp-proxy", "HTTP->stdio"): _REFUSES_NO_RESUME,
    ("mcp-hub", "SSE->HTTP"): _REFUSES,
    ("mcp-hub", "SSE->stdio"): _REFUSES_NO_RESUME,
}
CASES = [(b, d, s) for (b, d), by in EXPECTED.items() for s in by]


def marks(row: dict) -> str:
    """The row's marks as letters; ``?`` for a step missing or a mark not known here."""
    letter = {mark: key for key, mark in _LETTERS.items()}
    return "".join(letter.get(row.get("marks", {}).get(step), "?") for step in STEPS)


def clean_env() -> dict[str, str]:
    """The lab's defaults: no ``MCP_TEST_*`` setting of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}


@shared_run
def matrix() -> dict[tuple[str, str, str], dict]:
    """Every bridge, direction and default scenario: one ``bridges run`` for the module."""
    result = subprocess.run(
        [sys.executable, "-m", "mcp_lab", "bridges", "run", "--format", "json", "--quiet"],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=MATRIX_TIMEOUT,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout)["bridges"]
    return {(r["bridge"], r["direction"], r["scenario"]): r for r in rows}


def test_every_bridge_has_a_row_in_every_direction_and_scenario(npm) -> None:
    rows = matrix()
    for spec in BRIDGES.values():
        for way in spec.directions:
            for scenario in DEFAULT_SCENARIOS:
                row = rows[(spec.name, way.name, scenario)]
                assert row["failure"] is None, row["notes"]
                assert row["version"] == spec.version
    assert {(b, d) for b, d, _ in rows} == set(EXPECTED), "a bridge's direction is not expected"
    assert len({b for b, _, _ in rows}) >= 5


def test_the_run_is_kept_in_the_history(npm) -> None:
    """``bridges run`` keeps every row in the history (here the test run's own file,
    tests/conftest.py), each step's mark as the matrix printed it."""
    rows = matrix()  # the module's one run, made now if no test made it before
    kept = {(e.bridge, e.direction, e.scenario): e for e in BRIDGE_HISTORY.read()}
    for key, row in rows.items():
        assert kept[key].version == row["version"]
        assert {step: cell["mark"] for step, cell in kept[key].steps.items()} == row["marks"]
        assert kept[key].runs == row["runs"]


@pytest.mark.parametrize(("bridge", "way", "scenario"), CASES)
def test_each_row_is_as_documented(npm, bridge: str, way: str, scenario: str) -> None:
    rows = matrix()
    row = rows.get((bridge, way, scenario))
    assert row is not None, f"no row for {(bridge, way, scenario)}; rows: {sorted(rows)}"
    want, said = EXPECTED[(bridge, way)][scenario], f"{row.get('failure')}; {row.get('notes')}"
    assert marks(row) == want, f"{bridge} {way} {scenario}: {said}"


def test_a_row_rests_on_both_sides_and_keeps_its_files(npm) -> None:
    """A notification that passed: the lab delivered it (its evidence), it is on both
    wires, the client had it after the lab sent it; and the run's folder keeps it all."""
    row = matrix()[("mcp-remote", "stdio->HTTP", "single")]
    assert row["steps"]["notified"]["late_ms"] >= 0
    folder = Path(row["runs"]["single"])
    for name in ("bridge.log", "bridge.argv", "wire-client.jsonl", "wire-lab.jsonl",
                 "server.log", "updater.log", "events.jsonl", "probe.jsonl"):  # fmt: skip
        assert (folder / name).stat().st_size > 0, name
    for side in ("wire-client.jsonl", "wire-lab.jsonl"):
        wire = [json.loads(line) for line in (folder / side).read_text().splitlines()]
        assert any(m["method"] == "notifications/resources/updated" for m in wire), side
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert any(e["method"] == "notifications/resources/updated" and e["delivered"]
               for e in events)  # fmt: skip
    resumed = Path(row["runs"]["single-resume"]) / "wire-lab.jsonl"
    gets = [json.loads(line) for line in resumed.read_text().splitlines()]
    assert any(m["last_event_id"] for m in gets), "the resumption passed without Last-Event-ID"


def test_the_doc_holds_the_matrix_it_documents() -> None:
    """docs/bridges.md's generated table has every expected row with these marks."""
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("| ")]
    found: dict[tuple[str, str, str], str] = {}
    steps = len(STEPS)
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) < 5 + steps or cells[0] not in BRIDGES:
            continue
        words = [re.sub(r" [0-9/]+(ms)?.*$", "", c).replace("\\-", "-") for c in
                 cells[5 : 5 + steps]]  # fmt: skip
        letter = {mark: key for key, mark in _LETTERS.items()}
        found[(cells[0], cells[2].replace("-\\>", "->").replace("-&gt;", "->"), cells[3])] = (
            "".join(letter[w] for w in words)
        )
    assert found == {(b, d, s): EXPECTED[(b, d)][s] for b, d, s in CASES}


async def fake_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[BridgeRow, BridgeRow]:
    """The fake dropping updates, and the same fake dropping nothing, in ``single``."""
    monkeypatch.setenv("MCP_LAB_BRIDGES_CACHE", str(tmp_path))
    gate, single = asyncio.Semaphore(2), [registry.get("single")]
    program, runs = [sys.executable, str(FAKE_BRIDGE)], tmp_path / "runs"
    dropping, faithful = await asyncio.gather(
        run_bridge(bridge("fake-drop"), "0", single, gate=gate, runs=runs, program=program),
        run_bridge(bridge("fake-faithful"), "0", single, gate=gate, runs=runs,
                   program=[*program, "--drop", "nothing"]),
    )  # fmt: skip
    return dropping[0], faithful[0]


def check_notifications_pass(row: BridgeRow) -> None:
    """What a bridge that lets subscriptions through shows (mcp-remote's row)."""
    for step in ("subscribe", "notified", "re_read", "unsubscribe", "resume"):
        assert row.steps[step].mark == PASSED, (step, row.notes)


@pytest.mark.anyio
async def test_a_bridge_that_drops_notifications_is_caught(tmp_path, monkeypatch) -> None:
    dropping, faithful = await fake_rows(tmp_path, monkeypatch)
    check_notifications_pass(faithful)  # the fake is a bridge like the others...
    with pytest.raises(AssertionError):  # ...and the check fails for the one that drops
        check_notifications_pass(dropping)
    steps = dropping.steps
    assert [steps[s].mark for s in ("initialize", "list", "read", "subscribe")] == [PASSED] * 4
    notified = steps["notified"]
    assert notified.mark == DROPPED, dropping.notes
    assert "the lab delivered 1 to the bridge on an open stream" in notified.detail
    assert "1 never reached the client" in notified.detail
    assert steps["re_read"].mark == NOT_REACHED
    assert steps["unsubscribe"].mark == PASSED  # the client still unsubscribes after it
    # Both wires say the same as the lab and the client: on the lab's side, not the client's.
    folder = Path(dropping.runs["single"])
    lab_wire = (folder / "wire-lab.jsonl").read_text()
    client_wire = (folder / "wire-client.jsonl").read_text()
    assert "notifications/resources/updated" in lab_wire
    assert "notifications/resources/updated" not in client_wire


def test_a_fault_of_the_lab_is_not_put_on_the_bridge() -> None:
    """A relay that failed mid-run (code changed under a running matrix: the lab's
    processes import the tree as it is when each starts) loses the list_changed it was
    sending; the row says so first, from the lab's log or the bridge's output (where
    the bridge runs the lab's stdio server)."""
    lines = [
        "18:26:47.972 INFO    [resources/subscribe] uri=test://review/status session=s",
        "18:26:48.974 ERROR   [relay] unexpected error; restarting in 0.2s",
        "Traceback (most recent call last):",
        '  File "/work/services/mcp_lab/server/relay.py", line 211, in handle',
        "    message = contract.parse_update_message(payload, self._catalog)",
        "AttributeError: module 'mcp_lab.contract' has no attribute 'parse_update_message'",
        "18:26:49.178 INFO    [relay] subscribed channel=mcp:resources:updated",
    ]
    assert lab_faults(lines) == [
        "[relay] unexpected error (AttributeError: module 'mcp_lab.contract' has no "
        "attribute 'parse_update_message')"
    ]
    assert lab_faults([f"[supergateway] {line}" for line in lines])[0].startswith(
        "[relay] unexpected error (AttributeError: "
    )
    assert lab_faults(lines[:1] + lines[-1:]) == []
