"""Real agent CLIs against a fresh lab, offline: ``mcp-lab clients run --client X``.

Each test installs the pinned CLI from the npm registry (once, into the cache),
runs it end to end with the scripted model, and checks the verdict documented in
docs/clients.md. They need npm and the npm registry; outside CI they skip without
npm, with ``CI=true`` they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.lab import ROOT

IN_CI = os.environ.get("CI", "").lower() == "true"
# The first run installs the CLI (minutes); later runs take seconds.
RUN_TIMEOUT = 900
pytestmark = [pytest.mark.clients, pytest.mark.timeout(RUN_TIMEOUT + 60)]


def clean_env() -> dict[str, str]:
    """The lab's defaults: no ``MCP_TEST_*`` setting of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}


def run_client(name: str) -> dict:
    """The JSON row of ``mcp-lab clients run --client name`` (lab defaults)."""
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    result = subprocess.run(
        [sys.executable, "-m", "services", "clients", "run", "--client", name, "--format", "json"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout)["clients"]
    assert [row["client"] for row in rows] == [name]
    return rows[0]


def test_inspector_cli_subscribes_is_notified_and_re_reads() -> None:
    row = run_client("inspector")
    assert row["client_info"] == "inspector-cli/2.12.0", row
    assert (row["protocol"], row["transport"]) == ("2025-11-25", "streamable-http")
    assert row["level"] == row["server_level"] == 6, row["notes"]
    assert row["model_saw_v1"] is None and row["model_saw_v2"] is None  # no model involved
    assert row["exit_code"] == 0


def test_claude_code_reads_twice_without_subscribing_and_its_model_sees_v2() -> None:
    row = run_client("claude-code")
    assert row["client_info"] == "claude-code/2.1.197", row
    assert (row["protocol"], row["transport"]) == ("2025-11-25", "streamable-http")
    # The server saw list + read v1 and a read of v2, never a subscribe.
    assert row["server_level"] == 3, row["notes"]
    assert "read the resource but never subscribed" in row["notes"]
    assert row["model"]["read_tool"] == "ReadMcpResourceTool"
    assert row["model"]["api"] == "anthropic-messages"
    assert row["model_saw_v1"] is True and row["model_saw_v2"] is True
    assert row["level"] == 7
    assert row["exit_code"] == 0


def test_gemini_cli_reads_through_its_tool_and_its_model_sees_v2() -> None:
    row = run_client("gemini-cli")
    assert row["client_info"] == "gemini-cli-mcp-client/0.61.0", row
    assert row["model"]["read_tool"] == "read_mcp_resource"
    assert row["model"]["api"] == "gemini"
    assert row["protocol"] == "2025-06-18"
    assert row["model_saw_v1"] is True and row["model_saw_v2"] is True
    assert row["level"] == 7


def test_codex_reads_through_its_tool_and_its_model_sees_v2() -> None:
    row = run_client("codex")
    assert row["client_info"] == "codex-mcp-client/0.171.0", row
    assert row["model"]["read_tool"] == "read_mcp_resource"
    assert row["model"]["api"] == "openai-responses"
    assert row["protocol"] == "2025-06-18"
    assert row["model_saw_v1"] is True and row["model_saw_v2"] is True
    assert row["level"] == 7


def test_opencode_reads_twice_without_subscribing_and_its_model_sees_v2() -> None:
    row = run_client("opencode")
    assert row["client_info"] == "opencode/1.18.33", row
    assert (row["protocol"], row["transport"]) == ("2025-11-25", "streamable-http")
    assert row["server_level"] == 3, row["notes"]
    assert "read the resource but never subscribed" in row["notes"]
    assert row["model"]["read_tool"] == "read_mcp_resource"
    assert row["model"]["api"] == "openai-chat"
    assert row["model_saw_v1"] is True and row["model_saw_v2"] is True
    assert row["level"] == 7
    assert row["exit_code"] == 0


def test_copilot_speaks_2026_and_offers_its_model_no_resource_tool() -> None:
    row = run_client("copilot")
    assert row["client_info"] == "copilot-cli/1.0.102", row
    assert (row["protocol"], row["transport"]) == ("2026-07-28", "streamable-http")
    assert row["level"] == row["server_level"] == 1, row["notes"]
    assert row["model"]["api"] == "openai-chat"
    assert row["model"]["tools_offered"] and row["model"]["read_tool"] is None
    assert row["model_saw_v1"] is False and row["model_saw_v2"] is False
    assert any(note.startswith("no resource-read tool offered") for note in row["notes"])


def test_uninstallable_clients_get_a_row_that_says_why() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "services",
            "clients",
            "run",
            "--client",
            "goose",
            "--client",
            "crush",
            "--format",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["clients"]
    assert [r["client"] for r in rows] == ["goose", "crush"]
    for row in rows:
        assert row["level"] == 0 and row["notes"][0].startswith("not installable offline")


def test_bad_arguments_are_clear_errors() -> None:
    for args, message in (
        (["--client", "nope"], "unknown client"),
        (["--version", "claude-code"], "expected NAME=VERSION"),
        (["--version", "nope=1"], "unknown client 'nope'"),
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
