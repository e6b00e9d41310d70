"""A second, independent client: the official TypeScript SDK runs the legacy flow over HTTP.

The test installs the locked SDK from the npm registry (``npm ci``) on first use.
Without node/npm the test skips; with ``CI=true`` it fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import IN_CI
from tests.lab import ROOT

CLIENT_DIR = ROOT / "tests" / "ts_client"


@pytest.fixture(scope="module")
def node_client() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        reason = "node and npm are needed for the TypeScript SDK client"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    lock = CLIENT_DIR / "package-lock.json"
    installed = CLIENT_DIR / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=CLIENT_DIR,
            check=True,
            timeout=300,
            capture_output=True,
        )
    return node


@pytest.mark.timeout(600)  # the first use installs the SDK with npm ci
def test_typescript_sdk_client_runs_the_flow_to_version_2(lab, node_client) -> None:
    server, url = lab.server(update_delay_seconds="0.5")
    lab.updater(update_delay_seconds="0.5")
    result = subprocess.run(
        [node_client, "flow.mjs", url, "--timeout", "20"],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0, result.stdout + result.stderr
    reads = [s["version"] for s in steps if s["step"] == "read"]
    assert reads == [1, 2]
    assert [s["step"] for s in steps][-1] == "done"
    assert any(s["step"] == "notified" for s in steps)
    server.wait_for(r"\[initialize\] client connected .*client=ts-sdk-client/")
    server.wait_for(
        r"\[resources/read\] uri=test://review/status version=2 .*client=ts-sdk-client/"
    )
