"""services/mcp_lab/runners/program.py: what a run leaves running in its folder ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from mcp_lab.runners.program import KEPT_LINE_CHARS, Process, end_strays, run_folder

# Forks a child that leaves its session (as a daemon does), prints its pid, sleeps.
_DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    print(os.getpid(), flush=True)
    time.sleep(600)
"""


def _daemon(cwd: Path, home: Path) -> int:
    env = {**os.environ, "HOME": str(home)}
    with subprocess.Popen([sys.executable, "-c", _DAEMON], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, text=True) as parent:  # fmt: skip
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())  # the daemon keeps the pipe: one line, no EOF
        assert parent.wait(timeout=30) == 0
    return pid


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _running(pid)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")
def test_a_daemon_left_in_the_runs_folder_is_killed_and_nothing_else(tmp_path: Path) -> None:
    run, other = tmp_path / "run", tmp_path / "other"
    for folder in (run / "home", run / "work", other):
        folder.mkdir(parents=True)
    by_home = _daemon(other, run / "home")  # its HOME is the run's
    by_cwd = _daemon(run / "work", other)  # it works in the run's folder
    outside = _daemon(other, other)
    try:
        killed = end_strays(run)
        assert sorted(int(line.split()[0]) for line in killed) == sorted([by_home, by_cwd])
        assert all("import os, sys, time" in line for line in killed), killed
        assert _gone(by_home) and _gone(by_cwd)
        assert _running(outside)
        assert end_strays(run) == []
    finally:
        for pid in (by_home, by_cwd, outside):
            if _running(pid):
                os.kill(pid, 9)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")
def test_a_run_folder_ends_what_runs_in_it_even_when_the_run_is_interrupted() -> None:
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt), run_folder("fake", said.append, "fake single") as root:
        left = _daemon(root, root)
        raise KeyboardInterrupt
    assert _gone(left) and not root.exists()
    (line,) = said
    assert line.startswith(f"fake single: killed what it left running: {left} ")


@pytest.mark.anyio
async def test_a_clients_output_is_held_bounded_its_first_and_newest_lines_and_a_count(
    tmp_path: Path,
) -> None:
    """A client writing 200,000 lines and one of 50,000 characters: at most ``keep``
    lines are held, each cut, the first and the newest kept, the rest counted (every
    line was held: 150 MB of output made check use 1 GB)."""
    script = "import sys\nprint('x' * 50_000)\nfor i in range(200_000):\n    print(f'line {i}')\n"
    child = await Process.start(
        "chatty", [sys.executable, "-c", script], dict(os.environ), tmp_path, keep=100
    )
    with anyio.fail_after(60):
        await child.process.wait()
    assert await child.stop() == 0
    lines = child.lines
    assert len(lines) == 101, len(lines)  # 50 first, the count, 50 newest
    assert lines[0] == "x" * KEPT_LINE_CHARS + "...(50000 chars)"
    assert lines[1] == "line 0" and lines[-1] == "line 199999"
    assert lines[50] == (
        "[199901 line(s) of output left out here; the first and newest are kept]"
    ), lines[50]
    assert child.left_out == 199_901
