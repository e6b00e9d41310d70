"""What the suite itself holds to.

It leaves the user's HOME alone (tests/support/home.py, tests/conftest.py): its HOME,
XDG directories, run folders and history are the test run's own temporary folders, for
the tests and for the processes they start; the installs stay the user's. And a run
shared by a module's tests (tests/support/shared_run.py) is made once, its failure too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_lab.process import dirs
from mcp_lab.runners import run_folders
from mcp_lab.runners.history_store import history_path
from mcp_lab.runners.install import BRIDGES_CACHE, CLIENTS_CACHE, cache_dir
from tests.support import home
from tests.support.lab import ROOT
from tests.support.shared_run import shared_run

IDEAL = f"{sys.executable} {ROOT / 'docs' / 'examples' / 'ideal_client.py'}"


def _user_home() -> Path:
    return Path(home.USER_ENVIRON.get("HOME") or Path.home())


def _user_clients_cache() -> Path:
    named = home.USER_ENVIRON.get("MCP_LAB_CLIENTS_CACHE")
    return Path(named) if named else _user_home() / ".cache" / "mcp-lab" / "clients"


def test_the_suite_has_a_home_and_xdg_directories_of_its_own(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    own = tmp_path_factory.getbasetemp()
    assert Path.home() != _user_home()
    for name in ("HOME", *home.XDG, run_folders.RUNS_ENV, "MCP_LAB_HISTORY"):
        assert Path(os.environ[name]).is_relative_to(own), (name, os.environ[name])
    # what the lab makes of them: up's record, its Redis's data, the history, run folders
    for made in (
        dirs.state_dir(),
        dirs.default_data_dir(),
        history_path(),
        run_folders.runs_of("clients", cache_dir(CLIENTS_CACHE)),
        run_folders.runs_of("bridges", cache_dir(BRIDGES_CACHE)),
    ):
        assert made.is_relative_to(own), made
    # the installs stay shared: the user's (30 clients take long to install)
    assert cache_dir(CLIENTS_CACHE) == _user_clients_cache()
    assert not cache_dir(BRIDGES_CACHE).is_relative_to(own)


def test_a_check_a_test_starts_keeps_its_run_folder_in_the_suites_own(tmp_path: Path) -> None:
    """``mcp-lab check`` started as a test starts it (the test's environment): its run
    folder is under the suite's MCP_LAB_RUNS, and the user's runs folder gets none."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [sys.executable, "-m", "mcp_lab", "check", "--command", f"{IDEAL} {{url}}",
               "--format", "json"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 0, out + err
    (verdict,) = json.loads(out)["verdicts"]
    runs = Path(os.environ[run_folders.RUNS_ENV]) / "clients"
    assert verdict["runs"] and all(Path(r).is_relative_to(runs) for r in verdict["runs"].values())
    mine = re.compile(rf"\d{{8}}T\d{{6}}Z-{process.pid}(-\d+)?")
    assert [p for p in run_folders.invocations(runs) if mine.fullmatch(p.name)]
    user_runs = _user_clients_cache() / "runs"
    assert not [p for p in run_folders.invocations(user_runs) if mine.fullmatch(p.name)]


def test_a_shared_run_that_failed_fails_the_later_tests_at_once_without_running_again() -> None:
    made: list[str] = []

    @shared_run
    def field(name: str) -> str:
        made.append(name)
        if name == "broken":
            raise AssertionError("clients run of kilo: exit 2")
        return f"rows of {name}"

    assert field("fine") == field("fine") == "rows of fine"
    with pytest.raises(AssertionError, match="exit 2"):
        field("broken")
    for _ in range(3):
        with pytest.raises(pytest.fail.Exception) as again:
            field("broken")
        assert str(again.value.msg) == (
            "the shared run field('broken') failed earlier: clients run of kilo: exit 2"
        )
    assert made == ["fine", "broken"]


def test_a_shared_run_that_skipped_skips_the_later_tests() -> None:
    made: list[int] = []

    @shared_run
    def matrix() -> None:
        made.append(1)
        pytest.skip("no npm on PATH")

    for _ in range(2):
        with pytest.raises(pytest.skip.Exception, match="no npm on PATH"):
            matrix()
    assert made == [1]
