"""``mcp-lab check --format checks`` and ``--baseline`` as a CI job runs them: the ideal
client file of docs/examples gets a SUCCESS for every core requirement, written to
``--output``; a baseline entry it now passes is stale (exit 1, one line saying so); a
client that exits at once, held against a baseline of exactly its failures, passes
(exit 0); and a baseline that names an unknown check is refused before any lab starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.lab import ROOT

CLIENT_FILE = str(ROOT / "docs" / "examples" / "ideal-client.toml")
CORE = [
    "client-connects",
    "client-lists-resources",
    "client-reads-resource",
    "client-subscribes-or-listens",
    "client-receives-updated",
    "client-rereads-after-updated",
]


def mcp_lab(*args: str) -> subprocess.CompletedProcess[str]:
    # python3 on PATH is this one (the client file's command), with the mcp SDK
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "mcp_lab", "check", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def write_baseline(path: Path, entries: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps({"expected_failures": entries}))
    return str(path)


def test_the_ideal_client_passes_every_check_and_a_stale_entry_fails(tmp_path: Path) -> None:
    out = tmp_path / "checks.json"
    done = mcp_lab("--client-file", CLIENT_FILE, "--format", "checks", "--output", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS  ideal-client/1.0 in single over http: level 6" in done.stdout  # the table
    (run,) = json.loads(out.read_text())
    assert (run["client"], run["scenario"], run["transport"]) == ("ideal-client", "single", "http")
    assert [c["id"] for c in run["checks"]] == CORE
    assert {c["status"] for c in run["checks"]} == {"SUCCESS"}, run["checks"]
    listen = run["checks"][3]
    first_ref = listen["specReferences"][0]["id"]
    assert first_ref == "2026-07-28 basic/patterns/subscriptions"  # it speaks 2026-07-28
    assert "subscriptions/listen naming test://review/status" in listen["details"]

    stale = write_baseline(tmp_path / "stale.json", [
        {"client": "ideal-client", "scenario": "single", "check": "client-rereads-after-updated"},
    ])  # fmt: skip
    done = mcp_lab("--client-file", CLIENT_FILE, "--baseline", stale, "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "mcp-lab check: stale: ideal-client in single: client-rereads-after-updated now "
        f"passes; remove it from {stale}"
    ) in done.stderr.splitlines(), done.stderr


def test_a_baseline_of_exactly_the_failures_passes(tmp_path: Path) -> None:
    # A client that exits at once: never connected, so connecting fails and the rest is
    # not testable; the baseline lists all six.
    command = f"{sys.executable} -c 'import sys; sys.exit(3)'"
    exact = write_baseline(tmp_path / "known.json", [
        {"client": "command", "scenario": "single", "check": check, "reason": "exits at once"}
        for check in CORE
    ])  # fmt: skip
    done = mcp_lab("--command", command, "--format", "checks", "--baseline", exact, "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = json.loads(done.stdout)
    statuses = [c["status"] for c in run["checks"]]
    assert statuses == ["FAILURE"] + ["NOT_TESTABLE"] * 5, run["checks"]
    assert run["checks"][1]["details"] == "Not testable: never connected"
    lines = done.stderr.splitlines()
    assert "mcp-lab check: known failure: command in single: client-connects FAILURE" in lines
    assert lines[-1] == f"mcp-lab check: baseline {exact}: the failures are exactly its 6"


def test_a_baseline_naming_an_unknown_check_is_refused_before_the_lab_starts(
    tmp_path: Path,
) -> None:
    wrong = write_baseline(tmp_path / "wrong.json", [
        {"scenario": "single", "check": "client-subscribes"},
    ])  # fmt: skip
    started = time.monotonic()
    done = mcp_lab("--client-file", CLIENT_FILE, "--baseline", wrong)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown check 'client-subscribes'" in done.stderr
    assert done.stdout == "" and time.monotonic() - started < 30  # no lab, no client
