"""Compose project names (scripts/devtools/compose_projects.py): whose run a project
is, and which are left over by runs that are gone. The stacks themselves:
tests/system/test_compose_projects.py."""

from __future__ import annotations

import os
import subprocess

from scripts.devtools import compose_projects


def gone_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_names_say_whose_run_a_project_is() -> None:
    mine = compose_projects.project_name("test")
    assert mine.startswith(f"mcp-lab-test-{os.getpid()}-")
    dead = f"mcp-lab-scale-{gone_pid()}-0123abcd"
    assert compose_projects.leftovers([mine, dead, "mcp-lab-test-abcdef12", "other"]) == [dead]
