"""The level-6 workarounds of docs/clients.md ("What each library would change"), run:
each program of docs/examples/workarounds/ reaches the MCP SDK's session through a
library's public API and subscribes (2026-07-28 ``listen`` or 2025-era
``resources/subscribe``). ``mcp-lab check --client-file`` installs the library from
PyPI the way the lab installs its built-in library clients (the same package and pin),
runs the program against a fresh lab over http, and the test checks the level, the
protocol, that the library's own hook saw the update, and that the docs' table names
the program. With ``CI=true`` an install that fails is a failure; outside CI a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_lab.runners.clients.definition import load_client
from mcp_lab.runners.clients.pins import CLIENTS
from tests.support.ci import IN_CI
from tests.support.lab import ROOT

WORKAROUNDS = ROOT / "docs" / "examples" / "workarounds"
CHECK_TIMEOUT = 900  # the first run installs the library (20-60 s each here); later ones 5 s
MODERN, LEGACY = "2026-07-28", "2025-11-25"


# Each workaround: the built-in library client it works around, the level it reached
# over http (docs/clients.md), the protocol it negotiated, and the line its program
# prints once the library's own hook got notifications/resources/updated.
EXPECTED: dict[str, tuple[str, int, str, str]] = {
    "pydantic-ai-listen": ("pydantic-ai", 6, MODERN, "message_handler: resource updated"),
    "fastmcp-listen": ("fastmcp-client", 6, MODERN, "on_resource_updated: resource updated"),
    "fastmcp-legacy": ("fastmcp-client", 6, LEGACY, "on_resource_updated: resource updated"),
    "openai-agents-listen": ("openai-agents", 6, MODERN, "message_handler: resource updated"),
    "mcp-use-python-subscribe": ("mcp-use-python", 6, LEGACY, "message_handler: resource updated"),
    "langchain-mcp-adapters-subscribe": (
        "langchain-mcp-adapters", 6, LEGACY, "message_handler: resource updated",
    ),
}  # fmt: skip


def client_file(name: str) -> Path:
    return WORKAROUNDS / f"{name}.toml"


def test_every_workaround_has_an_expected_level_and_pins_its_librarys_package() -> None:
    assert {p.stem for p in WORKAROUNDS.glob("*.toml")} == set(EXPECTED)
    for name, (library, _, _, _) in EXPECTED.items():
        spec, builtin = load_client(client_file(name)), CLIENTS[library]
        assert spec.name == name and spec.kind == "library", spec
        # the library as the lab installs it: the built-in client's package and pin
        assert (spec.source, spec.package, spec.version) == (
            builtin.source, builtin.package, builtin.version,
        ), (name, library)  # fmt: skip
        assert spec.client_info == builtin.client_info, name
        program = Path(spec.here) / spec.argv[-1].removeprefix("{here}/")
        assert program.is_file(), program


def test_the_docs_table_names_each_workaround_program() -> None:
    text = (ROOT / "docs" / "clients.md").read_text(encoding="utf-8")
    section = text[text.index("### What each library would change") :]
    section = section[: section.index("\n### ", 1)]
    for name in EXPECTED:
        program = load_client(client_file(name)).argv[-1].removeprefix("{here}/")
        assert f"docs/examples/workarounds/{program}" in section, program


def check(name: str) -> tuple[dict, str]:
    """The verdict of ``mcp-lab check --client-file`` for workaround ``name``, and its
    program's output (the run folder's cli.log)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mcp_lab", "check", "--client-file", str(client_file(name)),
             "--format", "json", "--quiet", "--timeout", "90"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcp-lab check of {name} took over {CHECK_TIMEOUT} s", pytrace=False)
    said = (done.stdout + done.stderr)[-3000:]
    if done.returncode == 2 and "could not be started: install failed" in done.stderr:
        if IN_CI:
            pytest.fail(f"CI=true and {name} could not be installed:\n{said}", pytrace=False)
        pytest.skip(f"{name} could not be installed (no PyPI?): {done.stderr[-300:]}")
    assert done.returncode in (0, 1), f"exit {done.returncode}\n{said}"
    (verdict,) = json.loads(done.stdout)["verdicts"]
    log = Path(verdict["runs"]["scored"]) / "cli.log"
    return verdict, log.read_text(encoding="utf-8", errors="replace")


@pytest.mark.clients
@pytest.mark.timeout(CHECK_TIMEOUT + 60)
@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_workaround_reaches_its_level_through_the_librarys_own_hook(name: str) -> None:
    library, level, protocol, hook_line = EXPECTED[name]
    verdict, output = check(name)
    assert verdict["level"] == level, (verdict["notes"], output[-2000:])
    assert verdict["protocol"] == protocol, verdict
    assert verdict["client_info"].startswith(CLIENTS[library].client_info), verdict
    box = verdict["checklist"]
    assert box["subscribed"] and box["notified"] and box["re_read"], box
    # the update reached the library's hook (a timeout there would end the program
    # before its re-read), and the re-read saw version 2
    assert hook_line in output, output[-2000:]
    assert "version: 2" in output.split(hook_line, 1)[1], output[-2000:]
    # resources/subscribe is deprecated in mcp 2.x: said where it is used, and only there
    deprecated = "MCPDeprecationWarning" in output
    assert deprecated == (name == "fastmcp-legacy"), output[-2000:]
