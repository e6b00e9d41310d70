"""A client's own tests with the lab's mcp_lab fixture: the ideal client of
ideal_client.py, over http and over stdio, must re-read after the notification."""

import shlex
import subprocess
import sys
from pathlib import Path

from mcp_lab import FixtureLab

CLIENT = [sys.executable, str(Path(__file__).with_name("ideal_client.py"))]


def test_the_client_re_reads_after_a_notification_over_http(mcp_lab: FixtureLab) -> None:
    subprocess.run([*CLIENT, mcp_lab.url], check=True, timeout=60)
    verdict = mcp_lab.report("ideal-client")
    assert verdict.level == 6, verdict.notes
    assert verdict.checklist["notified"] and verdict.checklist["re_read"]


def test_the_client_re_reads_after_a_notification_over_stdio(mcp_lab: FixtureLab) -> None:
    server = shlex.join(mcp_lab.stdio_command)
    subprocess.run([*CLIENT, "--stdio", server], check=True, timeout=60)
    assert mcp_lab.report("ideal-client").level == 6


def test_a_client_that_never_starts_is_level_0(mcp_lab: FixtureLab) -> None:
    verdict = mcp_lab.report("ideal-client")  # nothing connected since the reset
    assert (verdict.level, verdict.checklist["connected"]) == (0, False)
    assert verdict.notes == ["no client connected since the last reset"]
