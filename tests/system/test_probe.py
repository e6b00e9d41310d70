"""`mcp-lab probe` against the lab, and against servers made to fail each way."""

from __future__ import annotations

import functools
import http.server
import json
import re
import sys
import threading
from importlib.metadata import version

import anyio
import pytest

from mcp_lab.process.embedded_redis import free_port
from mcp_lab.runners import probe_output
from tests.support.lab import ROOT, LabProcess, lab_env, mcp_lab

DELAY = "0.5"
TOKEN = "probe-token-1"


def readme_steps() -> list[str]:
    """The step lines the probe's section of docs/usage.md says it prints, in order."""
    usage = (ROOT / "docs" / "usage.md").read_text()
    start = usage.index("### The probe")
    section = usage[start : usage.index("\n## ", start)]
    listed = re.search(r"per step \((.*?)\)", section, re.DOTALL)
    assert listed, "the probe's section of docs/usage.md no longer lists the steps"
    return re.findall(r"`(\w+)`", listed.group(1))


def probe(url: str, *args: str) -> tuple[int, list[dict]]:
    result = mcp_lab(lab_env(""), "probe", "--url", url, *args)
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert steps and steps[-1]["step"] == "summary", result.stdout + result.stderr
    return result.returncode, steps


@pytest.mark.parametrize(
    ("protocol", "transport"),
    [("legacy", "http"), ("modern", "http"), ("auto", "http"), ("auto", "sse")],
)
def test_probe_runs_the_whole_flow_against_the_lab(lab, protocol, transport) -> None:
    _, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
    if transport == "sse":
        url = url.removesuffix("/mcp") + "/sse"
    code, steps = probe(url, "--protocol", protocol, "--transport", transport, "--timeout", "15")
    assert code == 0, steps
    # every step docs/usage.md lists, in its order, one JSON line each
    assert [s["step"] for s in steps] == readme_steps(), steps
    assert readme_steps() == [*probe_output.STEPS, "summary"]
    by_step = {s["step"]: s for s in steps}
    modern = protocol != "legacy" and transport == "http"
    assert by_step["capabilities"]["protocol"] == ("2026-07-28" if modern else "2025-11-25")
    assert by_step["capabilities"]["transport"] == (
        "sse" if transport == "sse" else "streamable-http"
    )
    assert by_step["capabilities"]["resources"]["subscribe"] is True
    # serverInfo (initialize result, or the 2026-07-28 server/discover stamp) names the lab
    assert by_step["capabilities"]["server"] == {
        "name": "mcp-subscribe-lab",
        "version": version("mcp-subscribe-lab"),
    }
    assert "version: 1" in by_step["initial_content"]["text"]
    assert by_step["notification_received"]["uri"] == "test://review/status"
    assert "version: 2" in by_step["final_content"]["text"]
    assert by_step["unsubscribed"]["method"] == (
        "subscriptions/listen stream closed" if modern else "resources/unsubscribe"
    )
    assert by_step["summary"]["ok"] is True


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_probe_says_the_server_wants_a_token(lab, transport) -> None:
    _, url = lab.server(auth_token=TOKEN)
    if transport == "sse":
        url = url.removesuffix("/mcp") + "/sse"
    args = ("--transport", transport, "--protocol", "auto", "--timeout", "1")
    code, steps = probe(url, *args)
    assert code == 3, steps
    assert "wants a token" in steps[-1]["message"], steps
    assert "--auth-token" in steps[-1]["message"], steps
    code, steps = probe(url, *args, "--auth-token", "not-the-token")
    assert code == 3, steps
    assert "refused the token" in steps[-1]["message"], steps
    # with the token it gets through the whole handshake (no updater: no notification)
    code, steps = probe(url, *args, "--auth-token", TOKEN)
    assert code == 6, steps
    assert steps[-1]["failed_step"] == "notification"


def test_probe_says_an_sse_url_is_legacy_sse_and_the_reverse(lab) -> None:
    _, url = lab.server()
    code, steps = probe(url.removesuffix("/mcp") + "/sse")
    assert code == 3, steps
    message = steps[-1]["message"]
    assert "is a legacy SSE endpoint" in message and "--transport sse" in message, message
    code, steps = probe(url, "--transport", "sse")
    assert code == 3, steps
    message = steps[-1]["message"]
    assert "is not a legacy SSE endpoint" in message and "--transport sse" in message, message


def test_probe_says_there_is_no_mcp_endpoint_at_a_wrong_path(lab) -> None:
    _, url = lab.server()
    for path, transport in [("/nope", "http"), ("/", "http"), ("/nope", "sse")]:
        wrong = url.removesuffix("/mcp") + path
        code, steps = probe(wrong, "--transport", transport)
        assert code == 3, steps
        assert f"no MCP endpoint at {wrong}" in steps[-1]["message"], steps


def test_probe_says_a_plain_http_server_is_not_an_mcp_endpoint(tmp_path) -> None:
    """A web server that is not an MCP server (here: Python's own, which answers a POST
    with 501 and HTML) is named as such, not as a JSON-RPC error."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as plain:
        serving = threading.Thread(target=plain.serve_forever, daemon=True)
        serving.start()
        try:
            url = f"http://127.0.0.1:{plain.server_address[1]}/mcp"
            code, steps = probe(url)
        finally:
            plain.shutdown()
    assert code == 3, steps
    message = steps[-1]["message"]
    assert message.startswith(f"this is not an MCP endpoint: {url} answered HTTP 501"), message
    assert "-32603" not in message


def test_probe_refuses_modern_over_sse() -> None:
    result = mcp_lab(
        lab_env(""),
        "probe",
        "--url",
        f"http://127.0.0.1:{free_port()}/sse",
        "--transport",
        "sse",
        "--protocol",
        "modern",
    )
    assert result.returncode == 2, result.stderr
    assert "no legacy SSE transport" in result.stderr


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
        [sys.executable, "-m", "tests.support.servers.no_subscribe", str(port)],
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
    result = mcp_lab(lab_env(""), "probe", "--url", url, "--protocol", "legacy", "--timeout", "1")
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 6
    assert steps[-1]["failed_step"] == "notification"
    # the wait is said on stderr (stdout stays one JSON object per line)
    assert "mcp-lab probe: waiting for notifications/resources/updated (up to 1 s)" in (
        result.stderr
    )


@pytest.mark.anyio
async def test_a_long_wait_says_every_so_often_how_long_it_has_waited(capsys) -> None:
    async with probe_output.waiting("the notification", timeout=30, every=0.05):
        await anyio.sleep(0.3)  # stands in for a slow server
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "mcp-lab probe: waiting for the notification (up to 30 s)"
    assert any(
        line.startswith("mcp-lab probe: still waiting for the notification (") for line in lines
    )


def test_a_modern_client_is_one_timeline_per_run_in_a_since_report(lab, redis_url) -> None:
    """2026-07-28 clients are keyed by clientInfo across resets; a report spanning
    a reset shows one timeline per run, each starting with its server/discover."""
    _, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
    env = lab_env(redis_url)
    for _ in range(2):
        code, steps = probe(url, "--protocol", "modern", "--timeout", "15")
        assert code == 0, steps
        assert mcp_lab(env, "reset").returncode == 0
    result = mcp_lab(env, "report", "--since", "1h", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["run"] is None and data["since"], data["window"]
    (probe_client,) = [c for c in data["clients"] if c["client"] == "mcp-lab-probe"]
    sessions = probe_client["sessions"]
    assert len(sessions) == 2, [s["session"] for s in sessions]
    for session in sessions:
        methods = [e["method"] for e in session["events"] if e["direction"] == "in"]
        assert methods[0] == "server/discover" and methods.count("server/discover") == 1, methods
        assert session["level"] == 6, session["notes"]
        marks = [session["checkpoints"][name] for name in ("connected", "subscribed", "notified")]
        assert marks == sorted(marks), marks  # connect, then subscribe, then notified


def test_a_second_probe_says_why_its_first_read_is_version_2_and_how_to_start_over(
    lab, redis_url
) -> None:
    """At 2026-07-28 the lab keeps the probe's state from one run to the next (keyed by
    its clientInfo): the second run's first read is version 2, which it says, with
    `mcp-lab reset`; after the reset the first read is version 1 again."""
    _, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)

    def run() -> tuple[dict, str]:
        result = mcp_lab(lab_env(""), "probe", "--url", url, "--timeout", "15")
        steps = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        assert result.returncode == 0, result.stdout + result.stderr
        return next(s for s in steps if s["step"] == "initial_content"), result.stderr

    first, said = run()
    assert first["version"] == 1 and "note" not in first
    assert "the first read is version" not in said
    again, said = run()
    assert again["version"] == 2 and "version: 2" in again["text"]
    assert again["note"].startswith("the first read is version 2, not 1: at 2026-07-28 the lab")
    assert "mcp-lab-probe/1" in again["note"] and "`mcp-lab reset`" in again["note"]
    assert f"mcp-lab probe: {again['note']}" in said
    assert mcp_lab(lab_env(redis_url), "reset").returncode == 0
    after, _ = run()
    assert after["version"] == 1 and "note" not in after
