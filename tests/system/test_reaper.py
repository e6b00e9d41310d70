"""A process test that times out leaves nothing running (tests/support/reaper.py): the
tree it started (a child in a session of its own, and that child's child) is killed
after its teardown, even though its parent is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import reaper
from tests.support.lab import ROOT

INNER = """
import subprocess, sys, time
import pytest

@pytest.mark.process
@pytest.mark.timeout(2)
def test_starts_a_tree_and_hangs():
    # a parent in a session of its own that starts a long child, then exits at once:
    # the child is an orphan the test never sees
    subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; subprocess.Popen(['sleep', '{mark}']); sys.exit(0)"],
        start_new_session=True,
    )
    subprocess.Popen(["sleep", "{mark}"], start_new_session=True)
    time.sleep(60)
"""


def running(mark: str) -> list[int]:
    """The processes running ``sleep MARK``."""
    return [
        pid
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
        if reaper.command_of(pid) == f"sleep {mark}"
    ]


def test_a_timed_out_test_leaves_no_process_behind(tmp_path: Path) -> None:
    mark = str(3000 + os.getpid() % 1000)
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(INNER).replace("{mark}", mark))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(inner)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Timeout" in done.stdout, done.stdout[-2000:]
    assert "left 2 process(es) running, killed" in done.stdout, done.stdout[-2000:]
    assert running(mark) == []
