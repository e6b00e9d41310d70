"""Ctrl-C on ``mcp-lab`` commands, as a terminal sends it: SIGINT to the command's whole
process group. The command ends within 5 s with one line and no traceback, keeps what it
finished, and leaves no process of its own behind."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_lab.process.embedded_redis import free_port
from mcp_lab.process.lifeline import PARENT_PID_ENV
from tests.support.lab import ROOT, lab_env

pytestmark = pytest.mark.process
STOP_SECONDS = 5.0


def _start(args: list[str], env: dict[str, str], out: Path, err: Path) -> subprocess.Popen[bytes]:
    """``mcp-lab ARGS`` in a process group of its own (a terminal's foreground job)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mcp_lab", *args], cwd=ROOT, env=env, process_group=0,
        stdout=out.open("wb"), stderr=err.open("wb"),
    )  # fmt: skip


def _wait_for_text(path: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert process.poll() is None, f"exited early:\n{path.read_text(errors='replace')}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{path.read_text()}"
        time.sleep(0.05)  # polling a file the process writes: nothing to await here


def _ctrl_c(process: subprocess.Popen[bytes]) -> float:
    """SIGINT to the process group; the seconds until the command exited."""
    sent = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return time.monotonic() - sent


def _children_of(pid: int) -> list[str]:
    """Processes still running that this command started (they carry its pid)."""
    marker = f"{PARENT_PID_ENV}={pid}".encode()
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                left.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return left


def _gone(pid: int, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _children_of(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _client_file(folder: Path, name: str, argv: list[str]) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nkind = "program"\nclient_info = "{name}"\ntransports = ["http"]\n'
        f"[install]\ncommand = {json.dumps(sys.executable)}\n"
        f"[run]\nargv = {json.dumps(argv)}\n"
    )
    return path


def test_ctrl_c_on_clients_run_prints_and_keeps_the_finished_rows_and_stops_the_rest(
    tmp_path: Path,
) -> None:
    quick = _client_file(
        tmp_path, "quick", ["{binary}", str(ROOT / "docs/examples/ideal_client.py")]
    )
    stuck = _client_file(tmp_path, "stuck", ["{binary}", "-c", "import time; time.sleep(600)"])
    history = tmp_path / "history.sqlite3"
    env = {
        **os.environ,
        "MCP_LAB_HISTORY": str(history),
        "MCP_LAB_CLIENTS_CACHE": str(tmp_path / "cache"),
    }
    out, err = tmp_path / "out", tmp_path / "err"
    args = ["clients", "run", "--client-file", str(quick), "--client-file", str(stuck),
            "--scenario", "single", "--tool", "off", "--jobs", "2", "--timeout", "600"]  # fmt: skip
    process = _start(args, env, out, err)
    _wait_for_text(err, "quick local single (no tool, http): level", process, 120)
    took = _ctrl_c(process)
    said = err.read_text()
    assert process.returncode == 130, said
    assert took < STOP_SECONDS, f"{took:.1f} s\n{said}"
    assert "Traceback" not in said and "Traceback" not in out.read_text(), said
    assert "interrupted: stopping the runs under way" in said
    assert "interrupted: 1 of 2 row(s) finished" in said
    assert "quick" in out.read_text() and "stuck" not in out.read_text()
    with sqlite3.connect(history) as db:
        kept = db.execute("SELECT client, source, level FROM verdicts").fetchall()
    assert kept == [("quick", "interrupted", 6)]
    assert _gone(process.pid) == []


def test_ctrl_c_as_up_starts_its_updater_says_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    env = lab_env("")
    env.pop("REDIS_URL")
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"))
    out, err = tmp_path / "out", tmp_path / "err"
    up = ["up", "--port", str(free_port()), "--redis-port", str(free_port())]
    process = _start(up, env, out, err)
    # The updater starts right after the banner: it is still importing when up stops it.
    _wait_for_text(out, "Ctrl-C stops everything.", process, 60)
    took = _ctrl_c(process)
    said = out.read_text() + err.read_text()
    assert took < STOP_SECONDS, f"{took:.1f} s\n{said}"
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said
    assert _gone(process.pid) == []
