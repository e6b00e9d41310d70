"""A user's own bridge file, run by ``mcp-lab bridges run --bridge-file`` as a user runs
it (a real process, a real mcp-remote from the npm registry): the built-in mcp-remote's
file under another name gets the built-in's marks. It needs npm and the npm registry
(outside CI it skips without npm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_lab.runners.bridges.specs import BRIDGE_DEFS
from tests.support.lab import ROOT

pytestmark = [pytest.mark.timeout(300)]

RUN_SECONDS = 280  # one row (and its resumption run), the install included
WAY = "stdio->HTTP"


def bridges_run(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "mcp_lab", "bridges", "run", *args, "--scenario", "single",
               "--direction", WAY, "--format", "json", "--quiet"]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def rows(started: subprocess.Popen[str]) -> list[dict[str, Any]]:
    try:
        out, err = started.communicate(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        started.kill()
        out, err = started.communicate()
        pytest.fail(f"no answer in {RUN_SECONDS} s: {err[-2000:]}")
    assert started.returncode == 0, err[-2000:]
    return list(json.loads(out)["bridges"])


def test_a_copy_of_mcp_remote_under_its_own_name_gets_its_marks(npm: str, tmp_path: Path) -> None:
    text = (BRIDGE_DEFS / "mcp-remote.toml").read_text()
    assert text.count('name = "mcp-remote"\n') == 1
    own = tmp_path / "my-remote.toml"
    own.write_text(text.replace('name = "mcp-remote"\n', 'name = "my-remote"\n'))
    # The file's bridge alone (no --bridge), and the built-in one, side by side.
    mine, built_in = bridges_run("--bridge-file", str(own)), bridges_run("--bridge", "mcp-remote")
    got, expected = rows(mine), rows(built_in)
    assert [(r["bridge"], r["direction"], r["scenario"]) for r in got] == [
        ("my-remote", WAY, "single")
    ]
    assert [r["bridge"] for r in expected] == ["mcp-remote"]
    assert got[0]["version"] == expected[0]["version"] == "0.15.1"
    assert got[0]["failure"] is None, got[0]["notes"]
    assert got[0]["marks"] == expected[0]["marks"], (got[0]["notes"], expected[0]["notes"])
    assert got[0]["marks"]["notified"] == "passed", got[0]["notes"]
