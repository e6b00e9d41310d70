"""mcp-lab clients: the documented matrix and its arguments, without running a client."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.lab import ROOT


def test_bad_arguments_are_clear_errors() -> None:
    for args, message in (
        (["--client", "nope"], "unknown client"),
        (["--version", "claude-code"], "expected NAME=VERSION"),
        (["--version", "nope=1"], "unknown client 'nope'"),
        (["--scenario", "some"], "unknown scenario 'some'"),
        (["--tool", "some"], "invalid choice: 'some'"),
        # a kind no built-in client has asks for none, not for all of them
        (["--kind", "program"], "no built-in client is of kind 'program'"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "mcp_lab", "clients", "run", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def test_a_client_the_runner_could_not_run_exits_1_and_names_no_run_folder(tmp_path) -> None:
    client_file = tmp_path / "absent.toml"
    client_file.write_text(
        'name = "absent"\nkind = "program"\nclient_info = "absent"\n'
        '[install]\ncommand = "no-such-program-here"\n[run]\nargv = ["{binary}"]\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "mcp_lab", "clients", "run", "--client-file", str(client_file),
         "--scenario", "single", "--tool", "off", "--format", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "MCP_LAB_HISTORY": str(tmp_path / "history.sqlite3"),
             "MCP_LAB_CLIENTS_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "exit code 1: the runner could not run absent" in result.stderr
    assert "each run's files" not in result.stderr
    assert "no run got as far as keeping files" in result.stderr
    (row,) = json.loads(result.stdout)["clients"]
    # a command on the machine is found, not installed: no install lines, "not found"
    assert row["runner_failed"].startswith("command not found: 'no-such-program-here'"), row
    assert "installing" not in result.stderr and "install failed" not in result.stderr


def test_a_client_files_pins_reach_its_install_and_reinstall_makes_it_again(tmp_path) -> None:
    """``[install] constraints`` and ``packages`` of a client file are what pip
    installs with it; ``--reinstall`` makes the cached virtualenv again."""
    client_file = tmp_path / "pinned.toml"
    client_file.write_text(
        'name = "pinned"\nkind = "program"\nclient_info = "pinned"\n'
        '[install]\npypi = "python-dateutil"\nversion = "2.9.0.post0"\nbinary = "python"\n'
        'constraints = ["six==1.16.0"]\npackages = ["idna==3.7"]\n'
        '[run]\nargv = ["{binary}", "-c", "pass"]\n'
    )
    cache = tmp_path / "cache"
    env = {**os.environ, "MCP_LAB_HISTORY": str(tmp_path / "history.sqlite3"),
           "MCP_LAB_CLIENTS_CACHE": str(cache)}  # fmt: skip

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mcp_lab", "clients", "run", "--client-file",
             str(client_file), "--scenario", "single", "--tool", "off", "--format", "json",
             *more],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False, env=env,
        )  # fmt: skip

    first = run()
    assert "pinned 2.9.0.post0: installing" in first.stderr, first.stderr
    venv = cache / "pinned-2.9.0.post0"
    freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "six==1.16.0" in freeze and "idna==3.7" in freeze, freeze
    (venv / "kept-by-the-cache").write_text("")
    again = run("--reinstall")
    assert "pinned 2.9.0.post0: reinstalling" in again.stderr, again.stderr
    assert "pinned 2.9.0.post0: installed (" in again.stderr
    assert not (venv / "kept-by-the-cache").exists()
    (row,) = json.loads(again.stdout)["clients"]
    assert row["scenario"] == "single" and not row["runner_failed"], row
