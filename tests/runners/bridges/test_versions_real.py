"""Real bridges on versions other than their pins, one run each (``single``, one
direction): npm mcp-proxy 5.12.5 started with its own command line gets marks; a
bridge started with a command line its version does not take is quoted by its error;
mcp-remote 0.1.18 slow to connect gets a true resumption note and the wait says where
it is; supergateway's default stateless mode has a row that says why notifications
cannot come. They need npm and the npm registry (outside CI they skip without npm)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from mcp_lab.runners.bridges import matrix
from mcp_lab.runners.bridges.install import install_bridge
from mcp_lab.runners.bridges.runner import run_bridge
from mcp_lab.runners.bridges.specs import BRIDGES, LOCAL, BridgeSpec, Ends, Launch, direction
from mcp_lab.runners.bridges.verdict import DROPPED, PASSED, BridgeRow
from mcp_lab.scenarios import registry

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

RUN_SECONDS = 240  # one row (and its resumption run), its install included
SLOW_START = 16.0  # how late the slowed bridge starts: past one 15 s beat of the wait


async def one_row(
    spec: BridgeSpec, version: str, way: str, runs: Path, **kwargs: object
) -> BridgeRow:
    rows = await asyncio.wait_for(
        run_bridge(spec, version, [registry.get("single")], gate=asyncio.Semaphore(2),
                   runs=runs, directions=[direction(way)], **kwargs),  # type: ignore[arg-type]
        RUN_SECONDS,
    )  # fmt: skip
    assert len(rows) == 1
    return rows[0]


def marks(row: BridgeRow) -> dict[str, str]:
    return {key: cell.mark for key, cell in row.steps.items()}


async def test_npm_mcp_proxy_5_runs_with_its_own_command_line(npm: str, tmp_path: Path) -> None:
    """5.x takes the server's command before "--": started so, it serves, and its row
    has marks and a level (it loses the update, where 6.x passes it)."""
    row = await one_row(BRIDGES["mcp-proxy"], "5.12.5", "HTTP->stdio", tmp_path / "runs")
    assert row.failure is None, row.notes
    assert row.lab_level is not None and row.lab_level >= 4, row.notes
    for step in ("initialize", "list", "read", "subscribe", "unsubscribe"):
        assert row.steps[step].mark == PASSED, (step, row.notes)
    assert row.steps["notified"].mark == DROPPED, row.notes
    assert "never reached the client" in row.steps["notified"].detail


def _as_6x(ends: Ends) -> Launch:
    """npm mcp-proxy's 6.x command line, whatever the version."""
    assert ends.port is not None and ends.lab_command is not None
    argv = [*ends.program, "--port", str(ends.port), "--host", "127.0.0.1", "--server", "stream"]
    return Launch([*argv, "--", *ends.lab_command], "/mcp")


async def test_a_bridge_that_fails_to_start_is_quoted_by_its_error(
    npm: str, tmp_path: Path
) -> None:
    """mcp-proxy 5.12.5 given 6.x's command line prints its usage, then its error: the
    row's note (as the matrix prints it) quotes the error, not the usage."""
    _, program = await install_bridge(BRIDGES["mcp-proxy"], "5.12.5")
    spec = BridgeSpec("mcp-proxy-as-6", "mcp-proxy 5 started as 6", LOCAL, None, "5.12.5",
                      "mcp-proxy", (direction("HTTP->stdio"),), launch=_as_6x)  # fmt: skip
    row = await one_row(spec, "5.12.5", "HTTP->stdio", tmp_path / "runs", program=program)
    assert row.failure is not None
    notes = matrix.BRIDGE_MATRIX.table([row]).splitlines()[-1]
    assert "Not enough non-option arguments: got 0, need at least 1" in notes, notes
    assert "Show help" not in notes and "--streamEndpoint" not in notes, notes
    assert "exited (exit code 1)" in notes, notes


async def test_mcp_remote_0_1_18_slow_to_connect_gets_a_true_resume_note(
    npm: str, tmp_path: Path
) -> None:
    """mcp-remote 0.1.18 started 16 s late (as on a loaded machine): the runner waits for
    its subscribe, cuts, and says what 0.1.18 does (it never reconnects its GET stream),
    not that the subscribe never reached the lab; the long wait is said on the way."""
    _, program = await install_bridge(BRIDGES["mcp-remote"], "0.1.18")
    late = f"import os, sys, time; time.sleep({SLOW_START}); os.execv(sys.argv[1], sys.argv[1:])"
    slowed = [sys.executable, "-c", late, *program]
    lines: list[str] = []
    row = await one_row(BRIDGES["mcp-remote"], "0.1.18", "stdio->HTTP", tmp_path / "runs",
                        program=slowed, progress=lines.append)  # fmt: skip
    assert row.failure is None, row.notes
    assert row.steps["notified"].mark == PASSED, row.notes
    resume = row.steps["resume"]
    assert "never reached the lab" not in resume.detail, row.notes
    assert (resume.mark, resume.detail) == (
        DROPPED,
        "never reconnected its GET stream after the cut",
    ), row.notes
    assert sum("resume:" in note for note in row.notes) == 1, row.notes
    beats = [line for line in lines if line.endswith(" s so far")]
    assert any(
        line.startswith("mcp-remote 0.1.18 stdio->HTTP single")
        and "waiting for the reference client's flow through the bridge" in line
        for line in beats
    ), lines
    assert (Path(row.runs["single-resume"]) / "cut.json").exists()


async def test_supergateway_stateless_has_a_row_that_says_why(npm: str, tmp_path: Path) -> None:
    """supergateway without --stateful starts the lab's stdio server anew per request:
    the subscribe reaches the lab, its session is gone when the update comes; the row
    says so first, and marks the update dropped (the bridge lost the subscription)."""
    row = await one_row(BRIDGES["supergateway-stateless"], "4.0.0", "HTTP->stdio",
                        tmp_path / "runs")  # fmt: skip
    assert row.failure is None, row.notes
    assert row.notes[0].startswith("stateless (supergateway's default without --stateful)")
    assert row.steps["subscribe"].mark == PASSED, row.notes
    assert row.steps["notified"].mark == DROPPED, row.notes
    assert "keeps no session" in row.steps["notified"].detail
    assert row.lab_sessions > 2, row.notes
