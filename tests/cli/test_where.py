"""services/mcp_lab/cli/where.py in process: which lab a command speaks of, from the
environment and a runtime file of a running ``mcp-lab up`` (this test's own process
stands for that up: it is alive, as the up would be; a child process of its own for
a second up beside it). Nothing answers on the ports used here (free ones), so only
the choice and its words are tested; tests/system/test_up.py runs the commands
against two real labs, and two real ups side by side."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_lab.cli import runtime, where
from mcp_lab.cli.runtime import Proc, UpRecord, runtime_file, write_record
from mcp_lab.process.embedded_redis import free_port
from mcp_lab.settings import LabSettings

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No lab settings in the environment, no .env, state and data of the test's own."""
    for name in list(os.environ):
        if name.startswith("MCP_TEST_") or name == "REDIS_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def up_running(redis_port: int, port: int, proc: Proc | None = None) -> UpRecord:
    """The runtime file of a live up: ``up.json`` (this process), or with ``proc`` the
    ``up-PORT.json`` of one started beside it."""
    record = UpRecord(
        proc or Proc.of(os.getpid()),
        f"redis://127.0.0.1:{redis_port}/0",
        f"http://127.0.0.1:{port}/mcp",
    )
    write_record(record, None if proc is None else runtime_file(port))
    return record


@pytest.fixture
def younger() -> Iterator[Proc]:
    """A live process started after this test's: a younger up (it ends with its stdin)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        yield Proc.of(child.pid)
    finally:
        child.communicate(timeout=10)


def beside(record: UpRecord) -> str:
    return (
        f"another mcp-lab up, pid {record.up.pid} (server {record.mcp_url}, Redis "
        f"{record.redis_url}): MCP_TEST_PORT={record.port} speaks to it"
    )


def test_the_running_up_is_the_lab_when_nothing_names_another(home: Path) -> None:
    record = up_running(free_port(), free_port())
    found = where.find(LabSettings(), kept_too=True)
    assert found.record == record and found.other_up is None
    assert (found.server.mcp_url, found.redis_url) == (record.mcp_url, record.redis_url)
    assert found.line().startswith(
        f"mcp-lab: Redis at {record.redis_url}, server at {record.mcp_url} "
        f"(the running mcp-lab up, pid {os.getpid()})"
    )


def test_settings_that_agree_with_the_running_up_change_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = up_running(free_port(), free_port())
    monkeypatch.setenv("REDIS_URL", record.redis_url)
    monkeypatch.setenv("MCP_TEST_PORT", record.mcp_url.split(":")[2].split("/")[0])
    found = where.find(LabSettings())
    assert found.record == record and found.others == []


@pytest.mark.parametrize("named", ["MCP_TEST_PORT", "REDIS_URL"])
def test_a_setting_naming_another_lab_makes_it_the_lab_of_every_part(
    home: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """Part named, part the up's was two labs at once (status showed the named server
    with the up's Redis); now the lab is the one named, whole, and the up is named as
    the other lab, with how to speak to it."""
    record = up_running(free_port(), free_port())
    other_port = free_port()
    value = str(other_port) if named == "MCP_TEST_PORT" else f"redis://127.0.0.1:{other_port}/0"
    monkeypatch.setenv(named, value)
    found = where.find(LabSettings(), kept_too=True)
    assert found.record is None and found.other_up == record
    if named == "MCP_TEST_PORT":
        assert found.server.mcp_url == f"http://127.0.0.1:{other_port}/mcp"
        assert found.redis_url == DEFAULT_REDIS
        head = f"Redis at {DEFAULT_REDIS} (the default), server at {found.server.mcp_url} "
        assert found.line().startswith(f"mcp-lab: {head}(MCP_TEST_PORT); ")
    else:
        assert found.redis_url == value
        assert found.server.mcp_url == "http://127.0.0.1:8089/mcp"
        assert found.line().startswith(f"mcp-lab: Redis at {value} (REDIS_URL), server at ")
    assert (
        f"not the running mcp-lab up, pid {os.getpid()} (server {record.mcp_url}, "
        f"Redis {record.redis_url}): unset {named} (environment and .env) to speak to it"
    ) in found.line()


def test_without_an_up_the_defaults_and_what_answers(home: Path) -> None:
    found = where.find(LabSettings())
    assert (found.server.mcp_url, found.redis_url) == ("http://127.0.0.1:8089/mcp", DEFAULT_REDIS)
    assert found.server_source == found.redis_source == "the default: no mcp-lab up runs"
    assert found.record is None and found.other_up is None


def test_the_kept_data_is_another_lab_only_beside_one_that_runs(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = home / "data" / "mcp-lab" / "redis"
    kept.mkdir(parents=True)
    (kept / "appendonly.aof").write_text("")
    monkeypatch.setenv("MCP_TEST_PORT", str(free_port()))
    found = where.find(LabSettings(), kept_too=True)
    if found.runs:  # something answers on 127.0.0.1:6379 on this machine
        assert "mcp-lab report --kept" in found.line()
    else:
        assert found.kept == kept and "--kept" not in found.line()
        assert found.line().endswith("; neither answers")


def test_the_port_named_finds_what_a_lab_beside_another_kept(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lab that ran beside another kept its data in redis-PORT: naming its port
    (MCP_TEST_PORT) finds that, not the default folder the first lab kept."""
    port = free_port()
    for name in ("redis", f"redis-{port}"):
        kept = home / "data" / "mcp-lab" / name
        kept.mkdir(parents=True)
        (kept / "appendonly.aof").write_text("")
    monkeypatch.setenv("MCP_TEST_PORT", str(port))
    assert where.find(LabSettings(), kept_too=True).kept == kept
    monkeypatch.setenv("MCP_TEST_PORT", str(free_port()))
    assert where.find(LabSettings(), kept_too=True).kept == home / "data" / "mcp-lab" / "redis"


def test_out_of_reach_says_what_to_run_instead(home: Path) -> None:
    found = where.Where(LabSettings(), "the default", "the default", None, True, False)
    assert found.redis_out_of_reach
    said = found.out_of_reach("trigger")
    assert said.startswith(f"cannot reach Redis at {DEFAULT_REDIS}, and the lab at ")
    assert "set REDIS_URL to that lab's Redis" in said
    compose = where.Where(
        LabSettings(), "the default", "the default", None, True, False, compose="lab1"
    )
    assert "`docker compose -p lab1 exec server mcp-lab trigger`" in compose.out_of_reach("trigger")
    assert "; docker compose project lab1; its Redis does not answer from here" in compose.line()
    # A Redis the user named (REDIS_URL) that does not answer is not blamed on compose.
    named = where.Where(LabSettings(), "the default", "REDIS_URL", None, True, False)
    said = named.out_of_reach("trigger")
    assert "docker compose" not in said and "(REDIS_URL names it)" in said, said
    assert "start that Redis" in said


def test_redis_answers_only_when_a_redis_does(redis_url: str) -> None:
    assert where.redis_answers(redis_url)
    assert not where.redis_answers(f"redis://127.0.0.1:{free_port()}/0")
    assert not where.redis_answers("unix:///nonexistent/redis.sock")


def test_of_several_ups_the_one_on_the_default_port_else_the_oldest(
    home: Path, younger: Proc
) -> None:
    """Nothing named: the up on the default port (8089) if one runs there, else the
    oldest; each other one is said as another lab, with the MCP_TEST_PORT to pick it."""
    old = up_running(free_port(), free_port())
    young = up_running(free_port(), 8089, younger)
    found = where.find(LabSettings())
    assert found.record == young and beside(old) in found.others
    assert f"(the running mcp-lab up, pid {younger.pid}); {beside(old)}" in found.line()
    runtime_file(8089).unlink()
    young = up_running(free_port(), free_port(), younger)
    found = where.find(LabSettings())
    assert found.record == old and beside(young) in found.others
    assert [r.up.pid for r in runtime.running_ups()] == [os.getpid(), younger.pid]


def test_mcp_test_port_picks_one_of_several_ups(
    home: Path, younger: Proc, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = up_running(free_port(), free_port())
    young = up_running(free_port(), free_port(), younger)
    monkeypatch.setenv("MCP_TEST_PORT", str(young.port))
    found = where.find(LabSettings())
    assert found.record == young and found.other_up is None
    assert found.server_source == f"the running mcp-lab up, pid {younger.pid}"
    assert found.redis_url == young.redis_url and beside(old) in found.others
    # healthcheck updater (runtime.find_redis): that up's Redis too
    assert runtime.find_redis(LabSettings())[0] == young.redis_url


def test_a_port_no_up_serves_is_another_lab_beside_every_up(
    home: Path, younger: Proc, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = up_running(free_port(), free_port())
    young = up_running(free_port(), free_port(), younger)
    monkeypatch.setenv("MCP_TEST_PORT", str(free_port()))
    found = where.find(LabSettings())
    assert found.record is None and found.other_up == old
    assert f"not the running mcp-lab up, pid {os.getpid()} (server {old.mcp_url}" in found.line()
    assert beside(young) in found.others


def test_a_dead_ups_record_beside_is_no_lab(home: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    record = up_running(free_port(), free_port())
    up_running(free_port(), free_port(), Proc(gone.pid, "1"))
    assert runtime.running_ups() == [record]
    found = where.find(LabSettings())
    assert found.record == record
    assert not any(other.startswith("another mcp-lab up") for other in found.others)
