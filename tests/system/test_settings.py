"""Settings: every bad value stops the process with one line naming the variable, exit code 2.

Each case runs a real ``mcp-lab`` process (``python -m mcp_lab``) with one bad
value in its environment. The cases are parametrized over ``LabSettings.model_fields``:
a new setting without a bad value in ``BAD`` fails here until one is added.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from mcp_lab.process.embedded_redis import free_port
from mcp_lab.settings import LabSettings, env_name
from tests.support.lab import ROOT, lab_env, mcp_lab

# One value per setting that the lab must refuse.
BAD: dict[str, str] = {
    "host": "http://0.0.0.0",
    "port": "70000",
    "path": "mcp",
    "sse_path": "sse",
    "host_origin_protection": "maybe",
    "allowed_hosts": "https://lab.example",
    "allowed_origins": "ui.example",
    "auth_token": "two words",
    "max_body_bytes": "10",
    "initial_status": "",
    "updated_status": "line one\nline two",
    "state_scope": "global",
    "update_delay_seconds": "-1",
    "max_subscriptions_per_session": "0",
    "scenario": "no-such-scenario",
    "updates_channel": "",
    "send_list_changed": "maybe",
    "enable_tool": "sometimes",
    "strict_methods": "perhaps",
    "session_idle_seconds": "inf",
    "max_sessions": "0",
    "max_requests_at_once": "0",
    "updater_heartbeat_seconds": "0",
    "take_over_every_seconds": "-1",
    "replica_heartbeat_seconds": "soon",
    "resume_block_ms": "9000",
    "dashboard_block_ms": "5",
    "dashboard_max_streams": "0",
    "dashboard_max_events": "10",
    "reconnect_backoff_max_seconds": "0",
    "redis_max_connections": "0",
    "head_timeout_seconds": "0",
    "body_timeout_seconds": "nan",
    "keep_alive_seconds": "0",
    "max_connections": "-1",
    "redis_pool_timeout_seconds": "never",
    "write_queue_max": "10",
    "log_level": "LOUD",
    "state_ttl_seconds": "10",
    "events_max": "5",
    "events_max_bytes": "1000",
    "redis_maxmemory": "a lot",
    "redis_client_buffer_limit": "64 mb",
    "resumable": "maybe",
    "resume_max_events": "1",
    "resume_ttl_seconds": "0",
    "retry_ms": "-1",
    "updater_consumer": "",
    "redis_url": "http://127.0.0.1:6379/0",
    "post_responses": "xml",
}


def bad_env(field: str, value: str) -> dict[str, str]:
    """A lab environment on a free port (nothing answers there) with one bad value."""
    env = lab_env("redis://127.0.0.1:1/0", port=str(free_port()))
    env[env_name(field)] = value
    return env


def assert_refused(result: subprocess.CompletedProcess[str], variable: str) -> None:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, output
    assert variable in lines[0], output
    assert result.stdout == "", output


@pytest.mark.parametrize("field", sorted(LabSettings.model_fields))
def test_every_setting_refuses_a_bad_value_by_its_variable_name(field: str) -> None:
    if field not in BAD:
        pytest.fail(f"setting {field!r} has no bad-value case: add one to BAD in {__file__}")
    # healthcheck loads the settings first, and is the cheapest command that does
    result = mcp_lab(bad_env(field, BAD[field]), "healthcheck", "server")
    assert_refused(result, env_name(field))


@pytest.mark.parametrize("command", [["server"], ["report"], ["updater"]])
@pytest.mark.parametrize("field", ["path", "redis_url", "log_level", "port"])
def test_server_updater_and_report_refuse_bad_values_in_one_line(
    command: list[str], field: str
) -> None:
    result = mcp_lab(bad_env(field, BAD[field]), *command)
    assert_refused(result, env_name(field))


def test_the_alternative_redis_variable_is_named_when_it_is_the_one_set() -> None:
    env = lab_env("", port=str(free_port()))
    del env["REDIS_URL"]
    env["MCP_TEST_REDIS_URL"] = "http://127.0.0.1:6379/0"
    assert_refused(mcp_lab(env, "healthcheck", "server"), "MCP_TEST_REDIS_URL")


def test_secrets_stay_out_of_the_error_line() -> None:
    env = bad_env("auth_token", "s3cret with a space")
    env["REDIS_URL"] = "http://user:hunter2@127.0.0.1:6379/0"
    result = mcp_lab(env, "healthcheck", "server")
    assert result.returncode == 2, result.stderr
    assert "MCP_TEST_AUTH_TOKEN" in result.stderr and "REDIS_URL" in result.stderr
    assert "s3cret" not in result.stderr and "hunter2" not in result.stderr


def test_good_values_are_accepted_and_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("MCP_TEST_") or key == "REDIS_URL":
            monkeypatch.delenv(key)
    monkeypatch.chdir(ROOT / "tests")  # no .env here
    good = {
        "MCP_TEST_LOG_LEVEL": "debug",
        "MCP_TEST_AUTH_TOKEN": "",
        "MCP_TEST_SSE_PATH": "",
        "MCP_TEST_PATH": "/lab/mcp",
        "MCP_TEST_HOST": "0.0.0.0",
        "MCP_TEST_ALLOWED_HOSTS": "lab.example, *.lab.example",
        "MCP_TEST_ALLOWED_ORIGINS": "https://ui.example,http://localhost:3000",
        "MCP_TEST_UPDATE_DELAY_SECONDS": "0.5",
        "REDIS_URL": "unix:///tmp/redis.sock",
    }
    for key, value in good.items():
        monkeypatch.setenv(key, value)
    settings = LabSettings()
    assert settings.log_level == "DEBUG"
    assert settings.auth_token is None  # empty: no token, as when unset
    assert settings.sse_path == ""
    assert settings.mcp_url.endswith(":8089/lab/mcp")
    assert settings.redis_url == "unix:///tmp/redis.sock"


def test_a_bad_value_from_dotenv_is_said_to_come_from_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from pydantic import ValidationError

    from mcp_lab.settings import describe

    for key in list(os.environ):
        if key.startswith("MCP_TEST_") or key == "REDIS_URL":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("MCP_TEST_STATE_SCOPE=global\nREDIS_URL=http://x/0\n")
    monkeypatch.setenv("MCP_TEST_PORT", "0")
    with pytest.raises(ValidationError) as caught:
        LabSettings()
    line = describe(caught.value)
    assert "MCP_TEST_STATE_SCOPE='global' (from .env)" in line, line
    assert "REDIS_URL='http://x/0' (from .env)" in line, line
    assert "MCP_TEST_PORT='0':" in line, line  # from the environment: no note


def test_an_ipv6_host_is_written_in_brackets_and_every_command_reaches_it(
    redis_url: str,
) -> None:
    """With ``MCP_TEST_HOST=::1`` the lab's URLs are ``http://[::1]:P/mcp`` (they said
    ``http://::1:P/mcp``, and status, report, trigger, connect and probe died with a
    traceback parsing it)."""
    from tests.support.lab import start_server, start_updater

    port = free_port()
    server = start_server(redis_url, port, host="::1", update_delay_seconds="0.2")
    updater = start_updater(redis_url, update_delay_seconds="0.2")
    try:
        env = lab_env(redis_url, host="::1", port=str(port))
        url = f"http://[::1]:{port}/mcp"
        assert LabSettings(host="::1", port=port).mcp_url == url
        for args, code in (
            (["status"], 0),
            (["report"], 0),
            (["trigger"], 4),  # nobody is subscribed: said, not a traceback
            (["connect", "claude-code"], 0),
            (["probe"], 0),
        ):
            result = mcp_lab(env, *args)
            said = result.stdout + result.stderr
            assert "Traceback" not in said, (args, said)
            assert result.returncode == code, (args, said)
            if args[0] in ("status", "connect"):
                assert url in said, (args, said)
    finally:
        updater.stop()
        server.stop()
