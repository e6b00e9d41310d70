"""Each ``clients run``, ``clients sweep`` and ``bridges run`` keeps its runs' files in
a folder of its own (services/mcp_lab/runners/run_folders.py): invocations side by side never
share one, a history row's folders hold that run's files for good, and the cache keeps
only the newest invocations, never removing one still going.

The folders' own rules are checked here directly (one test holds a folder from another
process); tests/system/test_run_folders.py runs ``mcp-lab clients run`` and ``mcp-lab
bridges run`` with programs of our own (tests/support/fakes.py)."""

from __future__ import annotations

import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_lab.runners import run_folders
from mcp_lab.runners.run_folders import KEPT_INVOCATIONS, RUNNING, invocation, invocations
from tests.support.lab import ROOT

HOLD_TIMEOUT = 30.0  # seconds a helper process may take to start or to end


def old(runs: Path, day: int, pid: int = 4242) -> Path:
    """The folder an invocation of an earlier day left (finished: its lock not held)."""
    folder = runs / f"200101{day:02d}T100000Z-{pid}"
    folder.mkdir(parents=True)
    (folder / RUNNING).touch()
    (folder / "kept.log").write_text(f"day {day}\n")
    return folder


class Holder:
    """Another process in an invocation of ``runs`` until told to stop."""

    def __init__(self, runs: Path) -> None:
        code = (
            "import sys; from pathlib import Path\n"
            "from mcp_lab.runners.run_folders import invocation\n"
            f"with invocation(Path({str(runs)!r})) as folder:\n"
            "    (folder / 'a-run').mkdir()\n"
            "    print(folder, flush=True)\n"
            "    sys.stdin.readline()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.folder = Path(_line_within(self.process, HOLD_TIMEOUT))

    def stop(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=HOLD_TIMEOUT) == 0
        self.process.stdout.close()


def _line_within(process: subprocess.Popen[str], seconds: float) -> str:
    """The first line ``process`` prints (in one write), waited for at most ``seconds``."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    if not ready:
        process.kill()
        raise TimeoutError(f"no line from the helper process within {seconds} s")
    return process.stdout.readline().strip()


def test_invocations_side_by_side_get_folders_of_their_own(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    other = Holder(runs)  # another process, started first
    try:
        with invocation(runs) as first, invocation(runs) as second:  # this one, twice
            assert len({first, second, other.folder}) == 3
            assert all(f.is_dir() and f.parent == runs for f in (first, second, other.folder))
            assert re.fullmatch(r"\d{8}T\d{6}Z-\d+(-\d+)?", first.name)
            pids = [f.name.split("-")[1] for f in (first, second, other.folder)]
            assert pids[0] == pids[1] != pids[2]
            for folder in (first, second):
                (folder / "a-run").mkdir()
    finally:
        other.stop()
    assert invocations(runs) == sorted([first, second, other.folder])


def test_pruning_keeps_the_newest_and_never_a_run_still_going(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    earlier = [old(runs, day) for day in range(1, 26)]  # 25 finished invocations
    legacy = runs / "inspector-2.12.0" / "single"  # the layout before, not an invocation's
    legacy.mkdir(parents=True)
    going = Holder(runs)  # a run still going (it pruned the 6 oldest as it started)
    try:
        with invocation(runs) as mine:  # this one prunes one more
            left = invocations(runs)
            (mine / "a-run").mkdir()
        assert len(left) == KEPT_INVOCATIONS
        assert set(left) == {*earlier[7:], going.folder, mine}
        assert [f.read_text() for f in (earlier[7] / "kept.log", earlier[-1] / "kept.log")] == [
            "day 8\n",
            "day 25\n",
        ]
        assert legacy.is_dir()  # only invocations' folders are touched

        # Keeping none: every finished one goes; the one still going, and this one, stay.
        with invocation(runs, kept=0) as alone:
            assert set(invocations(runs)) == {going.folder, alone}
    finally:
        going.stop()
    with invocation(runs, kept=0) as last:  # once it has ended, it goes too
        assert invocations(runs) == [last]
    assert legacy.is_dir()


def test_the_number_kept_is_a_clear_constant() -> None:
    assert run_folders.KEPT_INVOCATIONS == 20


def test_an_invocation_whose_runs_kept_no_file_leaves_no_folder(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with invocation(runs) as empty:
        assert empty.is_dir()
    assert not empty.exists() and invocations(runs) == []


def test_mcp_lab_runs_moves_the_run_folders_away_from_the_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache" / "clients"
    monkeypatch.delenv(run_folders.RUNS_ENV, raising=False)
    assert run_folders.runs_of("clients", cache) == cache / "runs"
    monkeypatch.setenv(run_folders.RUNS_ENV, str(tmp_path / "runs"))
    assert run_folders.runs_of("clients", cache) == tmp_path / "runs" / "clients"
    assert run_folders.runs_of("bridges", cache) == tmp_path / "runs" / "bridges"
    monkeypatch.setenv(run_folders.RUNS_ENV, "")
    assert run_folders.runs_of("bridges", cache) == cache / "runs"
