"""A second, independent client: the official TypeScript SDK runs the legacy flow over HTTP.

The ``node_client`` fixture (conftest.py) installs the locked SDK from the npm
registry (``npm ci``) on first use. Without node/npm the test skips; with
``CI=true`` it fails.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.lab import TS_CLIENT_DIR


@pytest.mark.timeout(600)  # the first use installs the SDK with npm ci
def test_typescript_sdk_client_runs_the_flow_to_version_2(lab, node_client) -> None:
    server, url = lab.server(update_delay_seconds="0.5")
    lab.updater(update_delay_seconds="0.5")
    result = subprocess.run(
        [node_client, "flow.mjs", url, "--timeout", "20"],
        cwd=TS_CLIENT_DIR,
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
