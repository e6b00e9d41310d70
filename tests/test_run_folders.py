"""Each ``clients run``, ``clients sweep`` and ``bridges run`` keeps its runs' files in
a folder of its own (services/runners/run_folders.py): invocations side by side never share
one, a history row's folders hold that run's files for good, and the cache keeps only
the newest invocations, never removing one still going.

The folders' own rules are checked here directly (one test holds a folder from another
process); the ``process`` tests run ``mcp-lab clients run`` with a client of our own
(tests/fake_agent.py, as tests/test_sweep.py) and ``mcp-lab bridges run`` with a bridge
of our own (tests/fake_bridge.py, as tests/test_bridges.py), each in a cache of the
test's own."""

from __future__ import annotations

import asyncio
import json
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.main import main
from services.runners import run_folders
from services.runners.bridges import history as bridges_history
from services.runners.bridges import runner as bridges_runner
from services.runners.bridges.specs import BRIDGES, BridgeSpec
from services.runners.clients import drivers, pins
from services.runners.clients import history as clients_history
from services.runners.clients import runner as clients_runner
from services.runners.clients.pins import ClientSpec
from services.runners.history_store import HISTORY_ENV
from services.runners.run_folders import KEPT_INVOCATIONS, RUNNING, invocation, invocations
from services.scenarios import registry
from tests.test_bridges import FAKE as FAKE_BRIDGE
from tests.test_bridges import fake as fake_bridge
from tests.test_sweep import BINARY, NAME, PACKAGE, driver, install_fakes

ROOT = Path(__file__).resolve().parent.parent
HOLD_TIMEOUT = 30.0  # seconds a helper process may take to start or to end
# The files every client run keeps (services/runners/clients/runs.py, _keep_logs).
CLIENT_FILES = ("cli.log", "server.log", "updater.log", "events.jsonl", "wire.jsonl")


def old(runs: Path, day: int, pid: int = 4242) -> Path:
    """The folder an invocation of an earlier day left (finished: its lock not held)."""
    folder = runs / f"200101{day:02d}T100000Z-{pid}"
    folder.mkdir(parents=True)
    (folder / RUNNING).touch()
    (folder / "kept.log").write_text(f"day {day}\n")
    return folder


class Holder:
    """Another process in an invocation of ``runs`` until told to stop."""

    def __init__(self, runs: Path) -> None:
        code = (
            "import sys; from pathlib import Path\n"
            "from services.runners.run_folders import invocation\n"
            f"with invocation(Path({str(runs)!r})) as folder:\n"
            "    print(folder, flush=True)\n"
            "    sys.stdin.readline()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.folder = Path(_line_within(self.process, HOLD_TIMEOUT))

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=HOLD_TIMEOUT) == 0


def _line_within(process: subprocess.Popen[str], seconds: float) -> str:
    """The first line ``process`` prints (in one write), waited for at most ``seconds``."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    if not ready:
        process.kill()
        raise TimeoutError(f"no line from the helper process within {seconds} s")
    return process.stdout.readline().strip()


def test_invocations_side_by_side_get_folders_of_their_own(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    other = Holder(runs)  # another process, started first
    try:
        with invocation(runs) as first, invocation(runs) as second:  # this one, twice
            assert len({first, second, other.folder}) == 3
            assert all(f.is_dir() and f.parent == runs for f in (first, second, other.folder))
            assert re.fullmatch(r"\d{8}T\d{6}Z-\d+(-\d+)?", first.name)
            pids = [f.name.split("-")[1] for f in (first, second, other.folder)]
            assert pids[0] == pids[1] != pids[2]
    finally:
        other.stop()
    assert invocations(runs) == sorted([first, second, other.folder])


def test_pruning_keeps_the_newest_and_never_a_run_still_going(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    earlier = [old(runs, day) for day in range(1, 26)]  # 25 finished invocations
    legacy = runs / "inspector-2.12.0" / "single"  # the layout before, not an invocation's
    legacy.mkdir(parents=True)
    going = Holder(runs)  # a run still going (it pruned the 6 oldest as it started)
    try:
        with invocation(runs) as mine:  # this one prunes one more
            left = invocations(runs)
        assert len(left) == KEPT_INVOCATIONS
        assert set(left) == {*earlier[7:], going.folder, mine}
        assert [f.read_text() for f in (earlier[7] / "kept.log", earlier[-1] / "kept.log")] == [
            "day 8\n",
            "day 25\n",
        ]
        assert legacy.is_dir()  # only invocations' folders are touched

        # Keeping none: every finished one goes; the one still going, and this one, stay.
        with invocation(runs, kept=0) as alone:
            assert set(invocations(runs)) == {going.folder, alone}
    finally:
        going.stop()
    with invocation(runs, kept=0) as last:  # once it has ended, it goes too
        assert invocations(runs) == [last]
    assert legacy.is_dir()


@pytest.fixture
def fake_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake client of tests/test_sweep.py pinned at a version that subscribes, in
    a cache of the test's own (installed); returns the cache's ``runs``."""
    cache = tmp_path / "clients"
    install_fakes(cache)
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(cache))
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path / "history.sqlite3"))
    spec = ClientSpec(NAME, "fake agent", PACKAGE, "1.3.0", BINARY, "fake-agent")
    monkeypatch.setitem(pins.CLIENTS, NAME, spec)
    monkeypatch.setitem(drivers.AGENT_DRIVERS, NAME, driver)
    return cache / "runs"


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


@pytest.mark.process
def test_each_clients_run_keeps_its_files_where_its_history_row_says(
    fake_client: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, first = mcp_lab(capsys, *CLIENTS_RUN)
    (entry,) = clients_history.read(client=NAME)
    kept_first = files_of(entry.runs)
    _, second = mcp_lab(capsys, *CLIENTS_RUN)
    assert first != second and invocations(fake_client) == [first, second]
    kept = clients_history.read(client=NAME)
    assert len(kept) == 2
    for entry, folder in zip(kept, (first, second), strict=True):
        assert set(entry.runs) == {"scored", "pull"}
        for run in entry.runs.values():
            where = Path(run)
            assert where.is_relative_to(folder), (where, folder)
            assert all((where / name).stat().st_size > 0 for name in CLIENT_FILES)
    # The second run left the first one's files as they were.
    assert files_of(kept[0].runs) == kept_first


def files_of(runs: dict[str, str]) -> dict[Path, bytes]:
    return {f: f.read_bytes() for run in runs.values() for f in Path(run).rglob("*") if f.is_file()}


@pytest.mark.process
@pytest.mark.anyio
async def test_clients_runs_side_by_side_keep_their_own_files(fake_client: Path) -> None:
    single = [registry.get("single")]

    async def one(runs: Path) -> list[Path]:
        rows = await clients_runner.run_clients(
            [NAME], {}, single, runs=runs, tool="off", observe=2, timeout=120
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
    monkeypatch.setenv(HISTORY_ENV, str(tmp_path / "history.sqlite3"))
    spec: BridgeSpec = fake_bridge("fake-faithful")
    monkeypatch.setitem(BRIDGES, spec.name, spec)

    async def installed(_: BridgeSpec, version: str) -> tuple[str, list[str]]:
        return version, [sys.executable, str(FAKE_BRIDGE), "--drop", "nothing"]

    monkeypatch.setattr(bridges_runner, "install", installed)
    argv = ("bridges", "run", "--bridge", spec.name, "--scenario", "single", "--format", "json")
    _, first = mcp_lab(capsys, *argv)
    _, second = mcp_lab(capsys, *argv)
    assert first != second
    assert invocations(tmp_path / "bridges" / "runs") == [first, second]
    kept = bridges_history.read(bridge=spec.name)
    assert len(kept) == 2
    for entry, folder in zip(kept, (first, second), strict=True):
        assert set(entry.runs) == {"single", "single-resume"}
        for run in entry.runs.values():
            where = Path(run)
            assert where.is_relative_to(folder), (where, folder)
            for name in ("bridge.log", "wire-client.jsonl", "wire-lab.jsonl", "events.jsonl"):
                assert (where / name).stat().st_size > 0, (where, name)


def test_the_number_kept_is_a_clear_constant() -> None:
    assert run_folders.KEPT_INVOCATIONS == 20
