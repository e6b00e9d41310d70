"""The ideal client docs/own-client.md shows first (docs/examples/ideal_client.py) is
the 2026-07-28 flow: ``Client.listen`` on a 2026-07-28 connection, over http and
stdio, level 6, and no ``MCPDeprecationWarning`` in its output (mcp 2.3.0 prints one
for every ``resources/subscribe``). tests/system/test_check.py checks the rest of its
verdict; tests/deploy/test_user_docs.py that the page shows this file as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lab import ROOT

CLIENT = f"{sys.executable} {ROOT / 'docs' / 'examples' / 'ideal_client.py'}"


@pytest.mark.parametrize(
    ("transport", "command"),
    [("http", f"{CLIENT} {{url}}"), ("stdio", f"{CLIENT} --stdio {{server_command}}")],
)
def test_the_ideal_client_listens_on_2026_07_28_with_no_deprecation_warning(
    transport: str, command: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_lab", "check", "--command", command, "--transport",
         transport, "--format", "json", "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = json.loads(done.stdout)["verdicts"]
    assert (verdict["level"], verdict["protocol"]) == (6, "2026-07-28"), verdict
    output = (Path(verdict["runs"]["scored"]) / "cli.log").read_text(encoding="utf-8")
    assert "version: 2" in output, output
    assert "Warning" not in output, output
