"""mcp-lab clients: the documented matrix and its arguments, without running a client."""

from __future__ import annotations

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
    ):
        result = subprocess.run(
            [sys.executable, "-m", "services", "clients", "run", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


