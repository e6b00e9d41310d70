"""Real agent CLIs against a fresh lab, offline: ``mcp-lab clients run --client X``.

Each test installs the pinned CLI from the npm registry (once, into the cache),
runs it end to end with the scripted model, and checks the verdict documented in
docs/clients.md. They need npm and the npm registry; outside CI they skip without
npm, with ``CI=true`` they fail.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from services.clients.matrix import NO_TOOL_SCENARIO as NO_TOOL
from services.clients.matrix import SCENARIOS
from services.clients.matrix import TOOL_SCENARIO as TOOL
from services.clients.pins import CLIENTS
from services.evidence.scoring import LEVEL_NAMES
from tests.lab import ROOT

IN_CI = os.environ.get("CI", "").lower() == "true"
# The first run installs the CLI (minutes); later runs take seconds.
RUN_TIMEOUT = 900


def clean_env() -> dict[str, str]:
    """The lab's defaults: no ``MCP_TEST_*`` setting of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}


@functools.cache
def rows_of(name: str) -> dict[str, dict]:
    """The JSON rows of ``mcp-lab clients run --client name`` (both scenarios, lab
    defaults otherwise), by scenario. Run once per client for all its tests."""
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
    assert [(row["client"], row["scenario"]) for row in rows] == [(name, s) for s in SCENARIOS]
    return {row["scenario"]: row for row in rows}


@dataclass(frozen=True)
class Verdict:
    """What docs/clients.md says of one pinned client in one scenario."""

    level: int
    server_level: int
    protocol: str
    saw_v1: bool | None
    saw_v2: bool | None
    # Notes the row must have (each a note's beginning), and must not have.
    notes: tuple[str, ...]
    absent: tuple[str, ...] = ()
    transport: str = "streamable-http"
    api: str | None = None  # the model API the CLI spoke
    read_tool: str | None = None  # the tool the model read with


NEVER_SUBSCRIBED = "read the resource but never subscribed"
POLLED_V2 = "read version 2 without a delivered notification before it"
REFLECTED = (
    "level 7: version 2 reached the model (a re-read it asked for), without: subscribed, notified"
)
TOOLS_LIST_ANSWERED = "asked tools/list (not advertised by default; answered, not refused)"
LISTEN_LIST_CHANGED = "listen asked only for list-changed events, never for the resource"
NO_LISTEN = "never sent a subscriptions/listen naming the resource"
NO_CONTENT = "the read tool gave the model no resource content"


def through(tool: str) -> str:
    return f"the model used its tool {tool}"


_INSPECTOR = Verdict(
    6,
    6,
    "2025-11-25",
    None,
    None,
    ("reached level 6 without: discovered",),
)
_OPENCODE = Verdict(
    7,
    3,
    "2025-11-25",
    True,
    True,
    (
        "reached level 3 without: discovered",
        NEVER_SUBSCRIBED,
        POLLED_V2,
        REFLECTED,
        through("read_mcp_resource"),
    ),
    api="openai-chat",
    read_tool="read_mcp_resource",
)
# The verdicts documented in docs/clients.md, per pinned client and scenario. A change
# is a lab regression or a new finding: either way, the docs and this table change.
# Two notes the lab once got wrong are held absent where they were wrong: "stream
# broke" for a client that closed its stream at the end of its run (Claude Code), and
# "asked tools/list (not advertised ...)" in the tool scenario, where tools are.
EXPECTED: dict[tuple[str, str], Verdict] = {
    ("inspector", NO_TOOL): _INSPECTOR,
    ("inspector", TOOL): _INSPECTOR,
    ("claude-code", NO_TOOL): Verdict(
        7,
        3,
        "2025-11-25",
        True,
        True,
        (NEVER_SUBSCRIBED, POLLED_V2, REFLECTED, through("ReadMcpResourceTool")),
        absent=("asked tools/list", "stream broke"),
        api="anthropic-messages",
        read_tool="ReadMcpResourceTool",
    ),
    ("claude-code", TOOL): Verdict(
        7,
        3,
        "2025-11-25",
        True,
        True,
        (NEVER_SUBSCRIBED, POLLED_V2, REFLECTED, through("ReadMcpResourceTool")),
        absent=("asked tools/list", "stream broke"),
        api="anthropic-messages",
        read_tool="ReadMcpResourceTool",
    ),
    ("gemini-cli", NO_TOOL): Verdict(
        7,
        3,
        "2025-06-18",
        True,
        True,
        (NEVER_SUBSCRIBED, POLLED_V2, REFLECTED, through("read_mcp_resource")),
        absent=("asked tools/list", "stream broke"),
        api="gemini",
        read_tool="read_mcp_resource",
    ),
    ("gemini-cli", TOOL): Verdict(
        7,
        3,
        "2025-06-18",
        True,
        True,
        (NEVER_SUBSCRIBED, POLLED_V2, REFLECTED, through("read_mcp_resource")),
        absent=("asked tools/list", "stream broke"),
        api="gemini",
        read_tool="read_mcp_resource",
    ),
    ("codex", NO_TOOL): Verdict(
        7,
        3,
        "2025-06-18",
        True,
        True,
        (
            "reached level 3 without: discovered",
            NEVER_SUBSCRIBED,
            POLLED_V2,
            TOOLS_LIST_ANSWERED,
            REFLECTED,
            through("read_mcp_resource"),
        ),
        api="openai-responses",
        read_tool="read_mcp_resource",
    ),
    ("codex", TOOL): Verdict(
        7,
        3,
        "2025-06-18",
        True,
        True,
        (
            "reached level 3 without: discovered",
            NEVER_SUBSCRIBED,
            POLLED_V2,
            REFLECTED,
            through("read_mcp_resource"),
        ),
        api="openai-responses",
        read_tool="read_mcp_resource",
    ),
    ("opencode", NO_TOOL): replace(_OPENCODE, absent=("asked tools/list",)),
    ("opencode", TOOL): replace(_OPENCODE, absent=("asked tools/list",)),
    ("copilot", NO_TOOL): Verdict(
        1,
        1,
        "2026-07-28",
        False,
        False,
        (
            TOOLS_LIST_ANSWERED,
            LISTEN_LIST_CHANGED,
            NO_LISTEN,
            "no resource-read tool (nor the server's tool) offered to the model",
        ),
        api="openai-chat",
    ),
    ("copilot", TOOL): Verdict(
        7,
        1,
        "2026-07-28",
        True,
        True,
        (
            "2 tool call(s); tool calls never raise the level",
            LISTEN_LIST_CHANGED,
            NO_LISTEN,
            REFLECTED,
            "the model used the server's tool lab-get_review_status",
        ),
        api="openai-chat",
        read_tool="lab-get_review_status",
    ),
}


@pytest.mark.clients
@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize(
    ("name", "scenario"), list(EXPECTED), ids=[f"{n}-{s.replace(' ', '-')}" for n, s in EXPECTED]
)
def test_pinned_client_verdict(name: str, scenario: str) -> None:
    row = rows_of(name)[scenario]
    want = EXPECTED[(name, scenario)]
    spec = CLIENTS[name]
    notes = row["notes"]
    assert row["client_info"] == f"{spec.client_info}/{spec.version}", row
    assert (row["protocol"], row["transport"]) == (want.protocol, want.transport), notes
    assert (row["level"], row["server_level"]) == (want.level, want.server_level), notes
    assert (row["model_saw_v1"], row["model_saw_v2"]) == (want.saw_v1, want.saw_v2), row
    for note in want.notes:
        assert any(n.startswith(note) for n in notes), (note, notes)
    for note in (*want.absent, NO_CONTENT, "timed out", "exit code", "update failed"):
        assert not any(n.startswith(note) for n in notes), (note, notes)
    assert row["exit_code"] == 0
    model = row["model"]
    if want.api is None:
        assert model is None  # the Inspector has no model
    else:
        assert (model["api"], model["read_tool"]) == (want.api, want.read_tool), model
        assert model["tools_offered"]


def documented_matrix() -> dict[tuple[str, str], list[str]]:
    """The matrix in docs/clients.md: its cells by (client, scenario)."""
    text = (ROOT / "docs" / "clients.md").read_text()
    section = text[text.index("## The matrix") :]
    cells: dict[tuple[str, str], list[str]] = {}
    for line in section.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and parts[0] in CLIENTS:
            cells.setdefault((parts[0], parts[2]), parts)
    return cells


def test_the_documented_matrix_says_what_the_tests_expect() -> None:
    """docs/clients.md's matrix (its first one: the current verdicts) holds every
    expected verdict, at the pinned versions."""
    matrix = documented_matrix()
    for (name, scenario), want in EXPECTED.items():
        cells = matrix[(name, scenario)]
        level = f"{want.level} {LEVEL_NAMES[want.level]}"
        if want.server_level != want.level:
            level += f" (server: {want.server_level})"
        yes = {None: "n/a", True: "yes", False: "no"}
        assert cells[1:8] == [
            CLIENTS[name].version,
            scenario,
            want.protocol,
            want.transport,
            level,
            yes[want.saw_v1],
            yes[want.saw_v2],
        ], (name, scenario)
        for note in want.notes:
            assert note in cells[8], (name, scenario, note)


@pytest.mark.clients
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
        assert row["scenario"] == "-"
        assert row["level"] == 0 and row["notes"][0].startswith("not installable offline")


def test_bad_arguments_are_clear_errors() -> None:
    for args, message in (
        (["--client", "nope"], "unknown client"),
        (["--version", "claude-code"], "expected NAME=VERSION"),
        (["--version", "nope=1"], "unknown client 'nope'"),
        (["--scenario", "some"], "invalid choice: 'some'"),
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
