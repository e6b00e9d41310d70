"""`mcp-lab probe` against the lab, and against servers made to fail each way."""

from __future__ import annotations

import json
import sys

import pytest

from services.cli.embedded_redis import free_port
from tests.lab import LabProcess, lab_env, mcp_lab

DELAY = "0.5"


def probe(url: str, *args: str) -> tuple[int, list[dict]]:
    result = mcp_lab(lab_env(""), "probe", "--url", url, *args)
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert steps and steps[-1]["step"] == "summary", result.stdout + result.stderr
    return result.returncode, steps


@pytest.mark.parametrize("protocol", ["legacy", "modern", "auto"])
def test_probe_runs_the_whole_flow_against_the_lab(lab, protocol) -> None:
    _, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
    code, steps = probe(url, "--protocol", protocol, "--timeout", "15")
    assert code == 0, steps
    by_step = {s["step"]: s for s in steps}
    expected_protocol = "2025-11-25" if protocol == "legacy" else "2026-07-28"
    assert by_step["capabilities"]["protocol"] == expected_protocol
    assert by_step["capabilities"]["resources"]["subscribe"] is True
    assert "version: 1" in by_step["initial_content"]["text"]
    assert by_step["notification_received"]["uri"] == "test://review/status"
    assert "version: 2" in by_step["final_content"]["text"]
    assert by_step["summary"]["ok"] is True


def test_probe_exit_code_for_an_unreachable_server() -> None:
    code, steps = probe(f"http://127.0.0.1:{free_port()}/mcp")
    assert code == 3
    assert steps[-1]["failed_step"] == "connect"


def test_probe_exit_code_for_a_missing_resource(lab) -> None:
    _, url = lab.server()
    code, steps = probe(url, "--uri", "test://not/here")
    assert code == 4
    assert "not in resources/list" in steps[-1]["message"]


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_probe_exit_code_for_a_server_without_subscribe(protocol) -> None:
    port = free_port()
    server = LabProcess(
        "no-subscribe",
        [sys.executable, "-m", "tests.servers.no_subscribe", str(port)],
        lab_env(""),
    )
    try:
        server.wait_for(r"Uvicorn running on", timeout=30)
        code, steps = probe(f"http://127.0.0.1:{port}/mcp", "--protocol", protocol)
    finally:
        server.stop()
    assert code == 5, steps
    assert steps[-1]["failed_step"] == "subscribe"


def test_probe_exit_code_when_no_notification_comes(lab) -> None:
    _, url = lab.server(update_delay_seconds="600")
    lab.updater(update_delay_seconds="600")
    code, steps = probe(url, "--protocol", "legacy", "--timeout", "1")
    assert code == 6
    assert steps[-1]["failed_step"] == "notification"
