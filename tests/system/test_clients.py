"""Real agent CLIs against a fresh lab, offline: ``mcp-lab clients run --client X``.

Each test installs the pinned CLI from the npm registry (once, into the cache),
runs it end to end with the scripted model (a scored run and a pull run per lab
setup), and checks the verdict documented in docs/clients.md, and that the verdict is
the client's own (``check_the_row_is_the_clients``). Two other versions of Claude Code
than the pin run too. They need npm and the npm registry; outside CI they skip without
npm, with ``CI=true`` they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from mcp_lab.evidence.levels import LEVEL_NAMES
from mcp_lab.runners.clients.definition import HTTP, STDIO
from mcp_lab.runners.clients.matrix import CHECKLIST
from mcp_lab.runners.clients.pins import CLIENTS
from mcp_lab.runners.clients.runs import NO_TOOL, TOOL
from mcp_lab.runners.install import resolve_version
from tests.support.ci import IN_CI
from tests.support.lab import ROOT
from tests.support.shared_run import shared_run

# The first run installs the CLI (minutes); later runs take seconds.
RUN_TIMEOUT = 900


def clean_env() -> dict[str, str]:
    """The lab's defaults: no ``MCP_TEST_*`` setting of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}


def _run(*args: str, timeout: float = RUN_TIMEOUT) -> list[dict]:
    """The JSON rows of ``mcp-lab clients run ARGS`` (lab defaults otherwise). Exit code 1
    is a runner failure of some clients (an install that failed, a CLI that did not
    start): their rows say so, and only their tests fail (:func:`row_of`); the run
    itself failed when it printed no rows."""
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    asked = " ".join(a for a, b in zip(args, ("", *args), strict=False) if b == "--client")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "mcp_lab", "clients", "run", *args, "--format", "json",
             "--quiet"],
            cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"clients run of {asked} took over {timeout:.0f} s", pytrace=False)
    said = result.stderr[-3000:]
    assert result.returncode in (0, 1), f"clients run of {asked}: exit {result.returncode}\n{said}"
    try:
        rows = json.loads(result.stdout)["clients"]
    except (json.JSONDecodeError, KeyError, TypeError):
        pytest.fail(f"clients run of {asked} printed no rows:\n{said}", pytrace=False)
    assert rows, f"clients run of {asked}: no rows\n{said}"
    return rows


def where(row: dict) -> str:
    """The row's client and run, for the first words of a failure."""
    return (f"{row['client']} {row['version']} {row['scenario']} "
            f"({row['setup']}, {row['transport']})")  # fmt: skip


def row_of(rows: dict, key: tuple[str, ...]) -> dict:
    """The row of ``key`` (its client first) from a shared run; the test fails naming
    the client when there is none, or when the runner could not run the client (its
    install failed: that client's tests fail, the others' do not)."""
    row = rows.get(key[0] if len(key) == 1 else key)
    if row is None:
        alone = [r for r in rows.values() if r["client"] == key[0] and r["scenario"] == "-"]
        if not alone:
            clients = sorted({r["client"] for r in rows.values()})
            pytest.fail(f"{key[0]}: no row for {key} (rows of {clients})", pytrace=False)
        row = alone[0]
    return usable(row)


def usable(row: dict) -> dict:
    """``row``, unless the runner could not run its client: then the test fails, naming
    the client and why (its install failed, it did not start)."""
    if row["runner_failed"] is not None:
        pytest.fail(f"{where(row)}: runner failed: {row['runner_failed']}", pytrace=False)
    if row["scenario"] == "-":
        pytest.fail(f"{where(row)}: not run: {'; '.join(row['notes'])}", pytrace=False)
    return row


# The agent CLIs and the Inspector the lab has scored longest: every scenario, both
# transports. The rest of the field (more CLIs, the client libraries) is played in
# `single` over http here (FIELD_EXPECTED); docs/clients.md has its every transport.
CORE = ("inspector", "claude-code", "gemini-cli", "codex", "opencode", "copilot")
# The scenarios the core clients are held to here. The 2026-07-28 duty scenarios
# (cached, graceful-close, partial-ack) have no pinned rows yet: docs/scenarios-2026.md.
CORE_SCENARIOS = ("single", "attached", "list-changed", "repeated", "template", "unsubscribe")


@shared_run
def matrix() -> dict[tuple[str, str, str, str], dict]:
    """Every core client in every core scenario that applies to it: one ``clients run``
    for all the tests of this module (the clients side by side, as by default)."""
    names = list(CORE)
    args = [a for name in names for a in ("--client", name)]
    played = [a for name in CORE_SCENARIOS for a in ("--scenario", name)]
    rows = _run(*args, *played, "--transport", HTTP, timeout=3 * RUN_TIMEOUT)
    return {(r["client"], r["scenario"], r["setup"], r["transport"]): r for r in rows}


@shared_run
def stdio_matrix() -> dict[tuple[str, str], dict]:
    """Every pinned client over stdio in ``single``, without the lab's tool: one ``clients
    run``. docs/clients.md has them in every scenario and setup; the suite keeps to one
    of each, for its time."""
    names = list(CORE)
    args = [a for name in names for a in ("--client", name)]
    rows = _run(*args, "--scenario", "single", "--tool", "off", "--transport", STDIO,
                timeout=3 * RUN_TIMEOUT)  # fmt: skip
    return {(r["client"], r["setup"]): r for r in rows}


@shared_run
def other_version(name: str, version: str) -> dict:
    (row,) = _run("--client", name, "--version", f"{name}={version}", "--scenario", "single",
                  "--tool", "off", "--transport", HTTP)  # fmt: skip
    return row


def answers(row: dict) -> dict[str, str | None]:
    """Each box's answer (None: the row has none for it, as a row that never ran)."""
    return {key: check and check["answer"] for key, check in row["checklist"].items()}


def check_the_row_is_the_clients(row: dict) -> None:
    """What holds of every row, whatever the client: the verdict is the client's own.

    Levels 1-6 are the lab's evidence (the wire capture agrees); 7 only by push or
    notice; without a subscribe at most 3; the pull run never raises the level; the
    runner did its part (no runner failure, the CLI ran to its end, the continued turn
    too)."""
    notes = row["notes"]
    assert row["runner_failed"] is None, notes
    assert not any(n.startswith(("runner failed", "did not exit", "exit code")) for n in notes)
    assert not any("wire capture disagrees" in n for n in notes), notes
    assert row["wire"] is not None and all(
        row["wire"][box] == (answers(row)[box] == "yes") for box in row["wire"]
    ), (row["wire"], row["checklist"])
    box = answers(row)
    if row["reflected"] in ("push", "notice"):
        assert row["level"] == 7
    else:
        assert row["level"] == row["server_level"], notes
    if box["subscribed"] == "no":
        assert row["level"] <= 3
    if row["model"] is not None:
        model = row["model"]
        assert model["mode"] == "scored" and model["read_calls"] <= 1, model
        assert model["update_applied_ms"] is not None, model
        assert any(n.startswith("after the update: ") and n.endswith("then a continued turn")
                   for n in notes), notes  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """What docs/clients.md says of one pinned client in one scenario."""

    level: int
    protocol: str
    answers: dict[str, str]
    # Notes the row must have (each a note's beginning), and must not have.
    notes: tuple[str, ...]
    absent: tuple[str, ...] = ()
    transport: str = "streamable-http"
    api: str | None = None  # the model API the CLI spoke
    read_tool: str | None = None  # the tool the model read with


def boxes(*answers: str) -> dict[str, str]:
    return dict(zip(CHECKLIST, answers, strict=True))


NEVER_SUBSCRIBED = "read the resource but never subscribed"
REFLECTED_NO = "reflected: no: no model request after the update carried version 2"
TOOLS_LIST_ANSWERED = "asked tools/list (not advertised by default; answered, not refused)"
LISTEN_LIST_CHANGED = "listen asked only for list-changed events, never for the resource"
NO_LISTEN = "never sent a subscriptions/listen naming the resource"
NO_CONTENT = "the read tool gave the model no resource content"
PULL_YES = "read on request (pull, never a level): yes"
READ_ONLY = boxes("yes", "yes", "yes", "no", "no", "no", "no", "yes")
READ_UNLISTED = boxes("yes", "no", "yes", "no", "no", "no", "no", "yes")


def through(tool: str) -> str:
    return f"the model read once, through its tool {tool}"


_INSPECTOR = Verdict(
    5,
    "2025-11-25",
    boxes("yes", "no", "yes", "yes", "yes", "no", "n/a", "yes"),
    ("reached level 5 without: discovered", "notified but never re-read", PULL_YES),
)
_OPENCODE = Verdict(
    3,
    "2025-11-25",
    READ_UNLISTED,
    (
        "reached level 3 without: discovered",
        NEVER_SUBSCRIBED,
        REFLECTED_NO,
        PULL_YES,
        through("read_mcp_resource"),
    ),
    absent=("asked tools/list",),
    api="openai-chat",
    read_tool="read_mcp_resource",
)
_CLAUDE = Verdict(
    3,
    "2025-11-25",
    READ_ONLY,
    (NEVER_SUBSCRIBED, REFLECTED_NO, PULL_YES, through("ReadMcpResourceTool")),
    absent=("asked tools/list", "stream broke"),
    api="anthropic-messages",
    read_tool="ReadMcpResourceTool",
)
_GEMINI = Verdict(
    3,
    "2025-06-18",
    READ_ONLY,
    (NEVER_SUBSCRIBED, REFLECTED_NO, PULL_YES, through("read_mcp_resource")),
    absent=("asked tools/list", "stream broke"),
    api="gemini",
    read_tool="read_mcp_resource",
)
_CODEX = Verdict(
    3,
    "2025-06-18",
    READ_UNLISTED,
    (
        "reached level 3 without: discovered",
        NEVER_SUBSCRIBED,
        REFLECTED_NO,
        PULL_YES,
        through("read_mcp_resource"),
    ),
    api="openai-responses",
    read_tool="read_mcp_resource",
)
# The verdicts documented in docs/clients.md, per pinned client and lab setup in the
# single scenario. A change is a lab regression or a new finding: either way, the docs
# and this table change. Two notes the lab once got wrong are held absent where they
# were wrong: "stream broke" for a client that closed its stream at the end of its run
# (Claude Code), and "asked tools/list (not advertised ...)" in the tool setup.
EXPECTED: dict[tuple[str, str], Verdict] = {
    ("inspector", NO_TOOL): _INSPECTOR,
    ("inspector", TOOL): _INSPECTOR,
    ("claude-code", NO_TOOL): _CLAUDE,
    ("claude-code", TOOL): _CLAUDE,
    ("gemini-cli", NO_TOOL): _GEMINI,
    ("gemini-cli", TOOL): _GEMINI,
    ("codex", NO_TOOL): replace(_CODEX, notes=(*_CODEX.notes, TOOLS_LIST_ANSWERED)),
    ("codex", TOOL): replace(_CODEX, absent=("asked tools/list",)),
    ("opencode", NO_TOOL): _OPENCODE,
    ("opencode", TOOL): _OPENCODE,
    ("copilot", NO_TOOL): Verdict(
        1,
        "2026-07-28",
        boxes("yes", "no", "no", "no", "no", "no", "no", "no"),
        (
            TOOLS_LIST_ANSWERED,
            LISTEN_LIST_CHANGED,
            NO_LISTEN,
            REFLECTED_NO,
            "no resource-read tool (nor the server's tool) offered to the model",
        ),
        api="openai-chat",
    ),
    # Its model reads through the lab's tool: tool calls never raise a level.
    ("copilot", TOOL): Verdict(
        1,
        "2026-07-28",
        boxes("yes", "no", "no", "no", "no", "no", "no", "yes"),
        (
            "1 tool call(s); tool calls never raise the level",
            LISTEN_LIST_CHANGED,
            NO_LISTEN,
            REFLECTED_NO,
            PULL_YES,
            "the model read once, through the server's tool lab-get_review_status",
        ),
        api="openai-chat",
        read_tool="lab-get_review_status",
    ),
}


def check_verdict(row: dict, want: Verdict, version: str) -> None:
    notes = row["notes"]
    check_the_row_is_the_clients(row)
    spec = CLIENTS[row["client"]]
    assert row["client_info"] == f"{spec.client_info}/{version}", row
    assert (row["protocol"], row["lab_transport"]) == (want.protocol, want.transport), notes
    assert row["level"] == want.level, notes
    assert answers(row) == want.answers, (row["checklist"], notes)
    for note in want.notes:
        assert any(n.startswith(note) for n in notes), (note, notes)
    for note in (*want.absent, NO_CONTENT):
        assert not any(n.startswith(note) for n in notes), (note, notes)
    model = row["model"]
    if want.api is None:
        assert model is None  # the Inspector has no model
    else:
        assert (model["api"], model["read_tool"]) == (want.api, want.read_tool), model
        assert model["tools_offered"]


@pytest.mark.clients
@pytest.mark.timeout(4 * RUN_TIMEOUT)
@pytest.mark.parametrize(
    ("name", "setup"), list(EXPECTED), ids=[f"{n}-{s.replace(' ', '-')}" for n, s in EXPECTED]
)
def test_pinned_client_verdict_in_single(name: str, setup: str) -> None:
    row = row_of(matrix(), (name, "single", setup, HTTP))
    check_verdict(row, EXPECTED[(name, setup)], CLIENTS[name].version)


# The other scenarios, lab setup `no tool`: per pinned client, the level and the
# scenario's own checkpoints (docs/clients.md shows them).
_NOT_UNSUBSCRIBED = {"unsubscribed": "no"}
_NONE_OF_3 = {"notified_each": "0/3", "re_read_each": "0/3"}
_HEARD_NOTHING_MORE = {"list_changed": "yes", "relisted": "no", "read_new": "no"}
SCENARIO_EXPECTED: dict[tuple[str, str], tuple[int, dict[str, str]]] = {
    ("inspector", "repeated"): (5, {"notified_each": "3/3", "re_read_each": "0/3"}),
    ("inspector", "unsubscribe"): (
        5,
        {"unsubscribed": "yes (resources/unsubscribe)", "quiet_after": "0"},
    ),
    ("inspector", "list-changed"): (4, _HEARD_NOTHING_MORE),
    ("inspector", "template"): (
        5,
        {"templates_listed": "no", "concrete_subscribed": "test://review/42"},
    ),
    **{
        (name, scenario): (level, want)
        for name, level in (
            ("claude-code", 3),
            ("gemini-cli", 3),
            ("codex", 3),
            ("opencode", 3),
            ("copilot", 1),
        )
        for scenario, want in (
            ("repeated", _NONE_OF_3),
            ("unsubscribe", _NOT_UNSUBSCRIBED),
            ("list-changed", _HEARD_NOTHING_MORE),
        )
    },
    # Gemini CLI lists the resources again on list_changed (it does not read the new one).
    ("gemini-cli", "list-changed"): (
        3,
        {"list_changed": "yes", "relisted": "yes", "read_new": "no"},
    ),
    # Only Codex and OpenCode offer their model a tool that lists templates; Gemini CLI
    # offers no resource tool at all to a server that lists no resources.
    ("claude-code", "template"): (3, {"templates_listed": "no", "concrete_subscribed": "no"}),
    ("gemini-cli", "template"): (2, {"templates_listed": "no", "concrete_subscribed": "no"}),
    ("codex", "template"): (3, {"templates_listed": "yes", "concrete_subscribed": "no"}),
    ("opencode", "template"): (3, {"templates_listed": "yes", "concrete_subscribed": "no"}),
    ("copilot", "template"): (1, {"templates_listed": "no", "concrete_subscribed": "no"}),
    # Typed into its interactive UI, @lab:URI is attached at version 1 (level 3, a read
    # of the CLI's own); after the update the attachment is never refreshed.
    ("claude-code", "attached"): (3, {}),
}


@pytest.mark.clients
@pytest.mark.timeout(4 * RUN_TIMEOUT)
@pytest.mark.parametrize(
    ("name", "scenario"), list(SCENARIO_EXPECTED), ids=[f"{n}-{s}" for n, s in SCENARIO_EXPECTED]
)
def test_pinned_client_in_each_scenario(name: str, scenario: str) -> None:
    row = row_of(matrix(), (name, scenario, NO_TOOL, HTTP))
    check_the_row_is_the_clients(row)
    level, checks = SCENARIO_EXPECTED[(name, scenario)]
    assert row["level"] == level, row["notes"]
    assert {c["key"]: c["answer"] for c in row["checks"]} == checks, row["checks"]
    if scenario == "attached":
        assert (
            "the resource was attached to the prompt (@lab:URI): its text reached the model"
            in (row["notes"])
        )
        assert row["model"]["read_via"] == "attachment" and row["reflected"] == "no"


@pytest.mark.clients
@pytest.mark.timeout(4 * RUN_TIMEOUT)
def test_the_matrix_has_every_scenario_that_applies_and_no_other() -> None:
    failed = {where(r): r["notes"] for r in matrix().values() if r["scenario"] == "-"}
    assert not failed, f"not run: {failed}"
    keys = [(n, s, setup) for n, s, setup, over in matrix() if over == HTTP]
    assert len(keys) == len(matrix())
    played = {(n, s) for n, s, setup in keys if setup == NO_TOOL and s != "single"}
    assert played == set(SCENARIO_EXPECTED)
    assert {(n, setup) for n, s, setup in keys if s == "single"} == set(EXPECTED)


# Over stdio (the CLI starts the lab's server itself, behind the stdio tap): the level of
# each pinned client in `single`, as over http: none of the agent CLIs subscribes over
# stdio either; the Inspector does, and is notified.
STDIO_EXPECTED = {
    "inspector": 5,
    "claude-code": 3,
    "gemini-cli": 3,
    "codex": 3,
    "opencode": 3,
    "copilot": 1,
}


@pytest.mark.clients
@pytest.mark.timeout(4 * RUN_TIMEOUT)
@pytest.mark.parametrize("name", list(STDIO_EXPECTED))
def test_pinned_client_over_stdio(name: str) -> None:
    row = row_of(stdio_matrix(), (name, NO_TOOL))
    check_the_row_is_the_clients(row)
    assert (row["transport"], row["lab_transport"]) == (STDIO, "stdio"), row
    assert row["level"] == STDIO_EXPECTED[name], row["notes"]
    assert row["protocol"] == row_of(matrix(), (name, "single", NO_TOOL, HTTP))["protocol"]


# Versions other than the pins: the runner must work on them as it does on the pin
# (install steps per version, deferred tools), and the verdict is still the client's.
OTHER_VERSIONS = {
    # Newest on npm (2026-12-01): 2026-07-28, and its MCP resource tools deferred
    # behind ToolSearch; the model loads them first, then reads version 1.
    ("claude-code", "2.1.332"): replace(
        _CLAUDE,
        protocol="2026-07-28",
        notes=(
            NEVER_SUBSCRIBED,
            REFLECTED_NO,
            PULL_YES,
            through("ReadMcpResourceTool"),
            "the model loaded deferred tools first: select:ReadMcpResourceTool,TaskList",
            LISTEN_LIST_CHANGED,
        ),
        absent=("stream broke",),
    ),
    # Three months older: a plain cli.js, no install.cjs to run.
    ("claude-code", "2.1.88"): _CLAUDE,
}


@pytest.mark.clients
@pytest.mark.timeout(2 * RUN_TIMEOUT)
@pytest.mark.parametrize(("name", "version"), list(OTHER_VERSIONS), ids=lambda v: str(v))
def test_other_versions_than_the_pins_get_a_verdict_of_their_own(name: str, version: str) -> None:
    row = usable(other_version(name, version))
    assert (row["version"], row["scenario"], row["setup"]) == (version, "single", NO_TOOL)
    check_verdict(row, OTHER_VERSIONS[(name, version)], version)


@pytest.mark.clients
def test_latest_is_resolved_through_npm() -> None:
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    spec = CLIENTS["claude-code"]
    assert spec.package is not None
    latest = resolve_version(spec.package, "latest")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", latest), latest
    assert resolve_version(spec.package, spec.version) == spec.version


@pytest.mark.clients
def test_uninstallable_clients_get_a_row_that_says_why() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_lab",
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
        assert (row["scenario"], row["setup"]) == ("-", "-")
        assert row["level"] is None and row["level_name"] == "not run"
        assert row["notes"][0].startswith("not installable offline")


@pytest.mark.clients
def test_a_version_that_cannot_be_installed_is_the_runners_failure_not_a_level() -> None:
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    result = subprocess.run(
        [sys.executable, "-m", "mcp_lab", "clients", "run", "--client", "codex",
         "--version", "codex=0.0.0-no-such-version", "--format", "json"],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "exit code 1: the runner could not run codex 0.0.0-no-such-version" in result.stderr
    assert "each run's files" not in result.stderr  # no run began: no folder to point at
    (row,) = json.loads(result.stdout)["clients"]
    assert (row["level"], row["level_name"]) == (None, "runner failed"), row
    assert row["runner_failed"].startswith("install failed: npm install @openai/codex@0.0.0")
    assert row["notes"][0].startswith("runner failed: install failed")


def test_the_documented_matrix_says_what_the_tests_expect() -> None:
    """docs/clients.md's matrix (its first one: the current verdicts) holds every
    expected verdict, at the pinned versions, over http and over stdio."""
    documented = documented_matrix()
    for (name, setup), want in EXPECTED.items():
        cells = documented[(name, "single", setup, HTTP)]
        level = f"{want.level} {LEVEL_NAMES[want.level]}"
        shown = [cell.split(" ")[0] for cell in cells[7:15]]
        assert cells[1:7] == [CLIENTS[name].version, "single", setup, HTTP, want.protocol,
                              level], cells  # fmt: skip
        assert shown == list(want.answers.values()), (name, setup, cells)
        for note in want.notes:
            assert note in cells[16], (name, setup, note)
    for (name, scenario), (level, checks) in SCENARIO_EXPECTED.items():
        cells = documented[(name, scenario, NO_TOOL, HTTP)]
        assert cells[6] == f"{level} {LEVEL_NAMES[level]}", cells
        for answer in checks.values():
            assert answer in cells[15], (name, scenario, cells[15])
    for name, level in STDIO_EXPECTED.items():
        cells = documented[(name, "single", NO_TOOL, STDIO)]
        assert cells[6] == f"{level} {LEVEL_NAMES[level]}", cells


def documented_matrix() -> dict[tuple[str, str, str, str], list[str]]:
    """The matrix in docs/clients.md: its cells by (client, scenario, setup, transport)."""
    text = (ROOT / "docs" / "clients.md").read_text()
    section = text[text.index("## The matrix") :]
    cells: dict[tuple[str, str, str, str], list[str]] = {}
    for line in section.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and parts[0] in CLIENTS and len(parts) > 6:
            cells.setdefault((parts[0], parts[2], parts[3], parts[4]), parts)
    return cells


# The rest of the field, in `single`, lab setup `no tool`, over http: the level each got
# on 2026-12-02 (docs/clients.md, "The wider field"). Agent CLIs with their scripted
# model; client libraries as the programs of services/mcp_lab/runners/clients/libraries/.
FIELD_EXPECTED: dict[str, int] = {
    # Agent CLIs: none subscribes; fast-agent lists, Kilo and Qwen Code read.
    "kilo": 3,
    "qwen-code": 3,
    "continue": 1,
    "cline": 1,
    "factory-droid": 1,
    "fast-agent": 2,
    "kimi-cli": 1,
    "mistral-vibe": 1,
    # Libraries: the SDKs that subscribe (or listen) and re-read get 6; the rest offer
    # no subscribe at all, read, and read again after a wait.
    "python-sdk": 6,
    "typescript-sdk": 6,
    "mcp-use-ts": 6,
    "mastra-mcp": 6,
    "fastmcp-client": 3,
    "mcp-use-python": 3,
    "langchain-mcp-adapters": 3,
    "pydantic-ai": 3,
    "openai-agents": 3,
    "llama-index-tools-mcp": 3,
    "vercel-ai-sdk": 3,
}


@shared_run
def field() -> dict[str, dict]:
    """Every installable client outside CORE, in one ``clients run``."""
    names = [n for n, spec in CLIENTS.items() if n not in CORE and not spec.not_installable]
    ways = [n for n in names if HTTP in CLIENTS[n].transports]
    args = [a for name in ways for a in ("--client", name)]
    rows = _run(*args, "--scenario", "single", "--tool", "off", "--transport", HTTP,
                timeout=3 * RUN_TIMEOUT)  # fmt: skip
    return {r["client"]: r for r in rows}


@pytest.mark.clients
@pytest.mark.timeout(4 * RUN_TIMEOUT)
def test_every_client_of_the_field_has_an_expected_level() -> None:
    outside = {n for n, spec in CLIENTS.items() if n not in CORE and not spec.not_installable}
    over_http = {n for n in outside if HTTP in CLIENTS[n].transports}
    assert set(FIELD_EXPECTED) == over_http
    assert sum(spec.kind == "cli" for spec in CLIENTS.values()) >= 14
    assert sum(spec.kind == "library" for spec in CLIENTS.values()) >= 8
    documented = documented_matrix()  # docs/clients.md, "The wider field"
    for name, level in FIELD_EXPECTED.items():
        cells = documented[(name, "single", NO_TOOL, HTTP)]
        assert cells[6].startswith(f"{level} "), (name, cells)


@pytest.mark.clients
@pytest.mark.timeout(4 * RUN_TIMEOUT)
@pytest.mark.parametrize("name", list(FIELD_EXPECTED))
def test_a_client_of_the_field_gets_its_level_and_its_wire_agrees(name: str) -> None:
    row = row_of(field(), (name,))
    notes = row["notes"]
    assert row["runner_failed"] is None, notes
    # The runner compares the tap with the lab's evidence of every session (a library
    # such as LlamaIndex's opens one per call; the row is its best session's).
    assert row["wire"] is not None, row
    assert not any("wire capture disagrees" in n for n in notes), notes
    assert row["level"] == FIELD_EXPECTED[name], notes
    assert (row["client_info"] or "").startswith(CLIENTS[name].client_info), row["client_info"]
