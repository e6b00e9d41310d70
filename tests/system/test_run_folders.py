"""Each runner invocation's folder, as processes: clients runs and bridges runs keep
their files where their history rows say, side by side too."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from mcp_lab.cli.main import main
from mcp_lab.runners.bridges import runner as bridges_runner
from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
from mcp_lab.runners.bridges.specs import BRIDGES, BridgeSpec
from mcp_lab.runners.clients import pins
from mcp_lab.runners.clients import runner as clients_runner
from mcp_lab.runners.clients.history import CLIENT_HISTORY
from mcp_lab.runners.history_store import HISTORY_ENV
from mcp_lab.runners.run_folders import RUNS_ENV, invocation, invocations
from mcp_lab.scenarios import registry
from tests.support.fakes import (
    FAKE_BRIDGE,
    NAME,
    install_fakes,
    sweep_agent,
)
from tests.support.fakes import bridge as fake_bridge


@pytest.mark.process
def test_each_clients_run_keeps_its_files_where_its_history_row_says(
    fake_client: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, first = mcp_lab(capsys, *CLIENTS_RUN)
    (entry,) = CLIENT_HISTORY.read(name=NAME)
    kept_first = files_of(entry.runs)
    _, second = mcp_lab(capsys, *CLIENTS_RUN)
    assert first != second and invocations(fake_client) == [first, second]
    kept = CLIENT_HISTORY.read(name=NAME)
    assert len(kept) == 2
    for entry, folder in zip(kept, (first, second), strict=True):
        assert set(entry.runs) == {"scored", "pull"}
        for run in entry.runs.values():
            where = Path(run)
            assert where.is_relative_to(folder), (where, folder)
            assert all((where / name).stat().st_size > 0 for name in CLIENT_FILES)
    # The second run left the first one's files as they were.
    assert files_of(kept[0].runs) == kept_first


@pytest.mark.process
@pytest.mark.anyio
async def test_clients_runs_side_by_side_keep_their_own_files(fake_client: Path) -> None:
    single = [registry.get("single")]

    async def one(runs: Path) -> list[Path]:
        rows = await clients_runner.run_clients(
            [pins.CLIENTS[NAME]], {}, single, runs=runs, tool="off", observe=2, timeout=120
        )
        return [Path(run) for row in rows for run in row.runs.values()]

    with invocation(fake_client) as a, invocation(fake_client) as b:
        runs_a, runs_b = await asyncio.gather(one(a), one(b))
    assert a != b
    for folder, made in ((a, runs_a), (b, runs_b)):
        assert len(made) == 2 and all(run.is_relative_to(folder) for run in made)
        for run in made:
            wire = [json.loads(line) for line in (run / "wire.jsonl").read_text().splitlines()]
            assert any(m["method"] == "resources/read" for m in wire), run


@pytest.mark.process
def test_each_bridges_run_keeps_its_files_where_its_history_row_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_LAB_BRIDGES_CACHE", str(tmp_path / "bridges"))
    monkeypatch.delenv(RUNS_ENV, raising=False)  # the default (the suite moves it): by the installs
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path / "history.sqlite3"))
    spec: BridgeSpec = fake_bridge("fake-faithful")
    monkeypatch.setitem(BRIDGES, spec.name, spec)

    async def installed(_: BridgeSpec, version: str) -> tuple[str, list[str]]:
        return version, [sys.executable, str(FAKE_BRIDGE), "--drop", "nothing"]

    monkeypatch.setattr(bridges_runner, "install_bridge", installed)
    argv = ("bridges", "run", "--bridge", spec.name, "--scenario", "single", "--format", "json")
    _, first = mcp_lab(capsys, *argv)
    _, second = mcp_lab(capsys, *argv)
    assert first != second
    assert invocations(tmp_path / "bridges" / "runs") == [first, second]
    kept = BRIDGE_HISTORY.read(name=spec.name)
    assert len(kept) == 2
    for entry, folder in zip(kept, (first, second), strict=True):
        assert set(entry.runs) == {"single", "single-resume"}
        for run in entry.runs.values():
            where = Path(run)
            assert where.is_relative_to(folder), (where, folder)
            for name in ("bridge.log", "wire-client.jsonl", "wire-lab.jsonl", "events.jsonl"):
                assert (where / name).stat().st_size > 0, (where, name)


# The files every client run keeps (services/mcp_lab/runners/clients/runs.py, keep_logs).
CLIENT_FILES = ("cli.log", "server.log", "updater.log", "events.jsonl", "wire.jsonl")


def mcp_lab(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, Path]:
    """``mcp-lab ARGV``: its output, and the folder its "each run's files" line names."""
    with pytest.raises(SystemExit) as exit_code:
        main(list(argv))
    said = capsys.readouterr()
    assert exit_code.value.code == 0, said.err
    (files,) = re.findall(r"each run's files: (.+)", said.err)
    return said.out, Path(files)


CLIENTS_RUN = ("clients", "run", "--client", NAME, "--scenario", "single", "--tool", "off",
               "--observe", "2", "--timeout", "120", "--format", "json")  # fmt: skip


def files_of(runs: dict[str, str]) -> dict[Path, bytes]:
    return {f: f.read_bytes() for run in runs.values() for f in Path(run).rglob("*") if f.is_file()}


@pytest.fixture
def fake_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake client of tests/system/test_sweep.py pinned at a version that subscribes, in
    a cache of the test's own (installed); returns the cache's ``runs``."""
    cache = tmp_path / "clients"
    install_fakes(cache)
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(cache))
    monkeypatch.delenv(RUNS_ENV, raising=False)  # the default (the suite moves it): by the installs
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path / "history.sqlite3"))
    monkeypatch.setitem(pins.CLIENTS, NAME, sweep_agent("1.3.0"))
    return cache / "runs"
