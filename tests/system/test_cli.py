"""``mcp-lab``: trigger, reset, and the one-command ``up``."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys

import pytest

from mcp_lab import contract
from mcp_lab.process.embedded_redis import free_port
from tests.support.lab import (
    ROOT,
    STATUS_URI,
    LabProcess,
    amcp_lab,
    connect,
    lab_env,
    mcp_lab,
    version_of,
)

pytestmark = pytest.mark.anyio

NO_AUTO_UPDATE = "600"


def cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return mcp_lab(lab_env(redis_url), *args)


async def acli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await amcp_lab(lab_env(redis_url), *args)


async def test_trigger_bumps_every_subscribed_session_and_reset_goes_back(lab, redis_url) -> None:
    _, url = await lab.aserver(update_delay_seconds=NO_AUTO_UPDATE)
    await lab.aupdater(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "a") as a, connect(url, "b") as b, connect(url, "idle") as idle:
        await a.session.subscribe_resource(STATUS_URI)
        await b.session.subscribe_resource(STATUS_URI)

        result = await acli(redis_url, "trigger")
        assert result.returncode == 0, result.stderr
        applied = [line for line in result.stdout.splitlines() if line.startswith("applied:")]
        assert len(applied) == 2, result.stdout  # a and b, not idle
        assert all("reads version 2" in line and "notified" in line for line in applied)
        assert f"mcp-lab: Redis at {redis_url} (REDIS_URL)" in result.stderr
        assert await a.wait_updated(1) == [STATUS_URI]
        assert await b.wait_updated(1) == [STATUS_URI]
        assert version_of(await a.read_text()) == 2
        assert version_of(await b.read_text()) == 2
        assert version_of(await idle.read_text()) == 1

        result = await acli(redis_url, "reset")
        assert result.returncode == 0, result.stderr
        assert "2 state(s) deleted" in result.stdout
        assert version_of(await a.read_text()) == 1


async def test_trigger_for_one_session(lab, redis_url) -> None:
    server, url = await lab.aserver(update_delay_seconds=NO_AUTO_UPDATE)
    await lab.aupdater(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "chosen") as a, connect(url, "other") as b:
        await a.session.subscribe_resource(STATUS_URI)
        await b.session.subscribe_resource(STATUS_URI)
        line = await server.await_line(r"\[initialize\] .*client=chosen/")
        session = line.split("session=")[1].split()[0]
        result = await acli(redis_url, "trigger", "--session", session)
        assert result.returncode == 0, result.stderr
        assert await a.wait_updated(1) == [STATUS_URI]
        await b.session.send_ping()
        assert b.updated == []
        assert server.matching(r"\[notification/send\] .*client=other/") == []
        assert version_of(await b.read_text()) == 1


def test_trigger_without_an_updater_says_the_job_is_pending(redis_url, redis_client) -> None:
    redis_client.sadd(contract.subscribers_key(STATUS_URI), "someone")
    result = cli(redis_url, "trigger", "--timeout", "0.5")
    assert result.returncode == 3
    assert "still pending" in result.stderr


def test_trigger_with_nobody_subscribed_queues_nothing_and_says_so(redis_url, redis_client) -> None:
    result = cli(redis_url, "trigger", "--timeout", "0.5")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "nobody is subscribed to test://review/status" in result.stderr
    assert "applied" not in result.stdout
    assert redis_client.xlen(contract.JOBS_STREAM) == 0


async def test_trigger_in_shared_scope_updates_the_shared_state_with_nobody_subscribed(
    lab, redis_url, redis_client
) -> None:
    await lab.aupdater(state_scope="shared")
    env = lab_env(redis_url, state_scope="shared")
    result = await amcp_lab(env, "trigger", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "applied"
    assert data["updated"] == [{"scope": "shared", "version": 2, "subscribed": False}]
    assert "0 subscribed session(s) notified" in data["message"]
    assert redis_client.hget(contract.state_key("shared", STATUS_URI), "version") == "2"


async def test_trigger_from_another_shell_acts_in_the_scope_of_the_lab_it_finds(
    lab, redis_url, redis_client
) -> None:
    # The lab shares its state; the trigger's own environment says nothing of it.
    await lab.aupdater(state_scope="shared")
    assert redis_client.get(contract.STATE_SCOPE_KEY) == "shared"
    result = await amcp_lab(lab_env(redis_url), "trigger", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["updated"] == [{"scope": "shared", "version": 2, "subscribed": False}]
    assert redis_client.hget(contract.state_key("shared", STATUS_URI), "version") == "2"


def test_trigger_for_an_unknown_session_queues_nothing_and_creates_no_state(
    redis_url, redis_client
) -> None:
    redis_client.sadd(contract.subscribers_key(STATUS_URI), "real-session")
    result = cli(redis_url, "trigger", "--session", "nosuch", "--json")
    assert result.returncode == 2, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "unknown-session" and data["job"] is None
    assert "Subscribed now: real-session" in data["message"]
    assert redis_client.xlen(contract.JOBS_STREAM) == 0
    assert not redis_client.exists(contract.state_key("nosuch", STATUS_URI))


async def test_trigger_json_says_what_changed(lab, redis_url) -> None:
    _, url = await lab.aserver(update_delay_seconds=NO_AUTO_UPDATE)
    await lab.aupdater(update_delay_seconds=NO_AUTO_UPDATE)
    async with connect(url, "json-client") as client:
        await client.session.subscribe_resource(STATUS_URI)
        result = await acli(redis_url, "trigger", "--json")
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["status"] == "applied" and data["job"]
        assert [(u["version"], u["subscribed"]) for u in data["updated"]] == [(2, True)]
        assert await client.wait_updated(1) == [STATUS_URI]
        # While the session is open (its states go with it when it ends).
        result = await acli(redis_url, "reset", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["states_deleted"] == 1


def test_trigger_rejects_an_unknown_uri(redis_url) -> None:
    result = cli(redis_url, "trigger", "--uri", "test://nope")
    assert result.returncode == 2
    assert "unknown uri" in result.stderr


def test_redis_cli_runs_the_bundled_redis_cli_against_the_labs_redis(
    redis_url, redis_client
) -> None:
    result = cli(redis_url, "redis-cli", "SET", "mcp-lab:test", "from redis-cli")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"
    assert f"mcp-lab: Redis at {redis_url} (REDIS_URL)" in result.stderr
    assert redis_client.get("mcp-lab:test") == "from redis-cli"
    result = cli(redis_url, "redis-cli", "--no-raw", "GET", "mcp-lab:test")
    assert result.stdout.strip() == '"from redis-cli"'


def test_commands_report_a_dead_redis_clearly() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    result = cli(dead, "reset")
    assert result.returncode == 1
    assert "cannot reach Redis" in result.stderr
    assert "Traceback" not in result.stderr


def test_server_on_a_port_in_use_says_so_and_exits_3(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = mcp_lab(lab_env(redis_url, port=str(port)), "server")
    assert result.returncode == 3
    assert f"[lab] could not listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_setting_is_named() -> None:
    env = lab_env("redis://127.0.0.1:1/0", state_scope="everywhere")
    result = mcp_lab(env, "reset")
    assert result.returncode == 2  # every bad setting: tests/system/test_settings.py
    assert "MCP_TEST_STATE_SCOPE" in result.stderr


async def test_readme_run_command_runs_the_whole_lab_and_stops_on_ctrl_c(tmp_path) -> None:
    """``python3 scripts/dev.py up``, as the README says (its venv exists by now)."""
    port = free_port()
    env = lab_env("", port=str(port), update_delay_seconds="0.5")
    env.pop("REDIS_URL")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    up = LabProcess(
        "up",
        [sys.executable, "scripts/dev.py", "up", "--redis-port", str(free_port())],
        env,
    )
    try:
        await up.await_line(r"^server +\| .*\[lab\] server ready", timeout=60)
        await up.await_line(r"^updater +\| .*\[updater\] ready", timeout=60)
        assert up.matching(rf"MCP server +http://127\.0\.0\.1:{port}/mcp")
        assert up.matching(
            r"^ +mcp-lab redis-cli publish mcp:resources:updated test://review/status"
        )
        async with connect(f"http://127.0.0.1:{port}/mcp", "up-client") as client:
            assert version_of(await client.read_text()) == 1
            await client.session.subscribe_resource(STATUS_URI)
            await client.wait_updated(1, timeout=15)
            assert version_of(await client.read_text()) == 2
    finally:
        up.process.send_signal(signal.SIGINT)
        code = up.stop()
    assert code == 0
    assert up.matching(r"stopping server and updater")


def test_uvicorns_own_lines_are_in_the_labs_log_format(lab) -> None:
    """A request uvicorn itself refuses is logged as every other line (time, level,
    a [tag]), not in uvicorn's own ``WARNING:  ...`` format."""
    server, url = lab.server()
    port = int(url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        raw.recv(1024)  # uvicorn answers 400 and closes
    line = server.wait_for(r"Invalid HTTP request received", timeout=10)
    assert re.match(r"^\d\d:\d\d:\d\d\.\d{3} WARNING \[http\] Invalid HTTP request", line), line
    assert not server.matching(r"^(WARNING|INFO|ERROR):  ")


def test_report_imports_neither_the_mcp_sdk_nor_fastmcp(redis_url) -> None:
    """``mcp-lab report`` stays quick: reading and scoring evidence needs no SDK (its
    import alone took 1.8-2.6 s on a loaded machine)."""
    env = lab_env(redis_url)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mcp_lab", "report", "--format", "json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    heavy = sorted(m for m in imported if m.split(".")[0] in ("mcp", "mcp_types", "fastmcp"))
    assert heavy == [], heavy


async def test_trigger_for_a_session_in_shared_scope_updates_the_shared_state_for_all(
    lab, redis_url, redis_client
) -> None:
    """With one shared state, a job naming a session bumped that session's own
    state, which nobody reads, and notified it of a version it then could not read."""
    _, url = await lab.aserver(update_delay_seconds=NO_AUTO_UPDATE, state_scope="shared")
    await lab.aupdater(update_delay_seconds=NO_AUTO_UPDATE, state_scope="shared")
    async with connect(url, "named") as named, connect(url, "other") as other:
        for client in (named, other):
            await client.session.subscribe_resource(STATUS_URI)
        subscribed = sorted(redis_client.smembers(contract.subscribers_key(STATUS_URI)))
        result = await acli(redis_url, "trigger", "--session", subscribed[0])
        assert result.returncode == 0, result.stdout + result.stderr
        assert "the shared state of test://review/status is now version 2" in result.stdout
        assert f"--session {subscribed[0]} has no state of its own" in result.stdout
        for client in (named, other):
            assert await client.wait_updated(1) == [STATUS_URI]
            assert version_of(await client.read_text()) == 2
        assert not redis_client.exists(contract.state_key(subscribed[0], STATUS_URI))
