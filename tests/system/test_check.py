"""``mcp-lab check`` as a CI job runs it, with the ideal Python SDK client of
docs/examples (ideal_client.py): level 6 and exit 0 over http and stdio, exit 1 when 7
is expected, a JUnit file; a command that cannot start, that exits at once or that never
ends; the same client as a client file gets the same row from ``clients run``; and its
own test suite with the ``mcp_lab`` fixture, in a folder of its own, passes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.support.lab import ROOT, TS_CLIENT_DIR

EXAMPLES = ROOT / "docs" / "examples"
CLIENT = f"{sys.executable} {EXAMPLES / 'ideal_client.py'}"


def mcp_lab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # python3 on PATH is this one (the client file's command), with the mcp SDK
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "mcp_lab", *args], cwd=cwd or ROOT, env=env,
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("transport", "command"),
    [("http", f"{CLIENT} {{url}}"), ("stdio", f"{CLIENT} --stdio {{server_command}}")],
)
def test_the_ideal_client_gets_level_6_and_exit_0(transport: str, command: str) -> None:
    done = mcp_lab("check", "--command", command, "--transport", transport, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = json.loads(done.stdout)["verdicts"]
    assert (verdict["level"], verdict["transport"], verdict["passed"]) == (6, transport, True)
    assert verdict["client_info"] == "ideal-client/1.0"
    # a command installs nothing, so nothing says it does
    assert "installing" not in done.stderr and "installed" not in done.stderr, done.stderr
    assert all(reached for box, reached in verdict["checklist"].items() if box != "reflected")


def test_expecting_7_fails_with_exit_1_and_a_junit_file_that_says_why(tmp_path: Path) -> None:
    junit = tmp_path / "check.xml"
    done = mcp_lab("check", "--command", f"{CLIENT} {{url}}", "--expect", "7",
                   "--format", "junit", "--output", str(junit))  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    # the file gets the JUnit, stdout the table, as --output's help says
    assert "FAIL  ideal-client/1.0 in single over http: level 6 re-read" in done.stdout
    assert "stdout then shows the table" in " ".join(mcp_lab("check", "--help").stdout.split())
    (suite,) = ET.parse(junit).getroot()
    failed = [case.get("name") for case in suite if case.find("failure") is not None]
    assert failed == ["level at least 7"]


def test_a_command_that_cannot_start_exits_2_and_one_that_misbehaves_is_named() -> None:
    missing = mcp_lab("check", "--command", "no-such-client-here {url}")
    assert missing.returncode == 2
    assert "'no-such-client-here' is not on PATH" in missing.stderr
    early = mcp_lab("check", "--command", f"{sys.executable} -c 'import sys; sys.exit(3)'")
    assert early.returncode == 1
    assert "never connected to the lab" in early.stdout
    assert "exit code 3: it printed nothing" in early.stdout
    stuck = mcp_lab("check", "--command", "sleep 60", "--timeout", "2")
    assert stuck.returncode == 1 and "did not exit; stopped at --timeout 2 s" in stuck.stdout


def test_a_command_gets_the_callers_environment_under_a_home_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The user's own command may need its config, a token, a build path: the caller's
    # variables reach it; HOME stays the run's (as for every client).
    monkeypatch.setenv("MCP_LAB_TEST_FOO", "bar")
    said = (
        "import os, sys; print(os.environ.get('MCP_LAB_TEST_FOO'), os.environ['HOME']); sys.exit(3)"
    )
    done = mcp_lab("check", "--command", f'{sys.executable} -c "{said}"')
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [n for n in done.stdout.splitlines() if "exit code 3:" in n]
    foo, home = line.split("exit code 3: ", 1)[1].split()
    assert foo == "bar", done.stdout
    assert home != os.environ["HOME"] and "mcp-lab-" in home, home
    assert "the command runs with your environment under a HOME of the run's own" in done.stderr
    # --own-home: the caller's HOME (its config, logins, caches), said so.
    mine = mcp_lab("check", "--own-home", "--command", f'{sys.executable} -c "{said}"')
    (line,) = [n for n in mine.stdout.splitlines() if "exit code 3:" in n]
    assert line.split("exit code 3: ", 1)[1].split() == ["bar", os.environ["HOME"]], mine.stdout
    assert "the command runs with your environment and your HOME (--own-home)" in mine.stderr
    refused = mcp_lab("check", "--own-home", "--client", "inspector")
    assert refused.returncode == 2 and "--own-home is for --command" in refused.stderr


def test_a_client_that_names_itself_nothing_is_still_scored(tmp_path: Path) -> None:
    # clientInfo name "": the session is that client's, not nobody's (it was level 0).
    nameless = tmp_path / "nameless_client.py"
    source = (EXAMPLES / "ideal_client.py").read_text()
    assert 'name="ideal-client"' in source
    nameless.write_text(source.replace('name="ideal-client"', 'name=""'))
    done = mcp_lab("check", "--command", f"{sys.executable} {nameless} {{url}}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'PASS  ""/1.0 in single over http: level 6' in done.stdout


def test_the_same_client_as_a_client_file_gets_the_same_row_in_clients_run() -> None:
    client_file = str(EXAMPLES / "ideal-client.toml")
    check = mcp_lab("check", "--client-file", client_file, "--format", "json")
    assert check.returncode == 0, check.stdout + check.stderr
    (verdict,) = json.loads(check.stdout)["verdicts"]
    run = mcp_lab("clients", "run", "--client-file", client_file, "--scenario", "single",
                  "--tool", "off", "--transport", "http", "--format", "json",
                  "--quiet")  # fmt: skip
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)["clients"]
    assert (row["client"], row["level"], row["transport"]) == ("ideal-client", 6, "http")
    got = {box: row["checklist"][box]["answer"] == "yes" for box in verdict["checklist"]}
    assert got == verdict["checklist"]


def test_a_clients_own_suite_with_the_mcp_lab_fixture_passes(tmp_path: Path) -> None:
    suite = tmp_path / "own"
    suite.mkdir()
    for name in ("ideal_client.py", "test_own_client.py"):
        shutil.copy(EXAMPLES / name, suite / name)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        cwd=suite, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout


def test_the_fixtures_verdict_carries_the_scenarios_own_checks(tmp_path: Path) -> None:
    # In ``repeated`` a test can see how many of the 3 updates its client heard.
    from mcp_lab.runners.clients import fixture_lab

    lab = fixture_lab.start(tmp_path, "repeated")
    try:
        argv = [sys.executable, str(EXAMPLES / "ideal_client.py"), lab.url]
        subprocess.run(argv, check=True, timeout=60, capture_output=True)
        verdict = lab.report("ideal-client")
    finally:
        lab.stop()
    assert set(verdict.checks) == {"notified_each", "re_read_each"}, verdict
    assert all(answer.endswith("/3") for answer in verdict.checks.values()), verdict.checks


@pytest.mark.parametrize(
    ("transport", "target"), [("http", "{url}"), ("stdio", "--stdio {server_command}")]
)
def test_the_typescript_ideal_client_gets_level_6_too(
    node_client: str, tmp_path: Path, transport: str, target: str
) -> None:
    shutil.copy(EXAMPLES / "ideal_client.mjs", tmp_path / "ideal_client.mjs")
    (tmp_path / "node_modules").symlink_to(TS_CLIENT_DIR / "node_modules")
    done = mcp_lab("check", "--command", f"{node_client} ideal_client.mjs {target}",
                   "--transport", transport, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"PASS  ideal-ts-client/1.0.0 in single over {transport}: level 6" in done.stdout
