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
