"""``mcp-lab clients run``: each real agent CLI against a fresh lab, offline.

For one client and lab setup (``no tool`` / ``tool``) the runner makes two runs, each
with a fresh lab (:mod:`services.clients.lab`), a wire tap in front of it
(:mod:`services.clients.wire`) and, for agent CLIs, the scripted model
(:mod:`services.clients.model`), all on loopback, and a HOME of the run's own:

- **scored**: the model reads the resource once; when the result is back the runner
  applies the lab's update (target ``*``); the model then takes neutral steps for a
  bounded time, answers, and the runner continues the same session once with the
  CLI's own continue flag. Nobody asks for the resource again: what the client does
  with the update is its own. The row's level comes from this run only.
- **pull**: the model reads, the update is applied, the model asks to read again.
  It answers "can the client read the new version when asked?" (the ``pull`` column).

:mod:`services.clients.verdict` turns both into the row. The MCP Inspector's CLI
(``mcpdo``) has no model: its scored run is connect, read, subscribe and wait (the
lab updates a subscriber by itself); its pull run is connect, read, update, read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services import contract
from services.catalog import REVIEW_STATUS
from services.clients import drivers
from services.clients.endpoint import serve
from services.clients.install import InstallError, cache_dir, install, resolve_version
from services.clients.lab import Lab, Process, running_lab
from services.clients.matrix import SCENARIOS, TOOL_SCENARIO, Row
from services.clients.model import PULL, SCORED, ModelRecord, ScriptedModel, versions_in
from services.clients.pins import CLIENTS, ClientSpec
from services.clients.verdict import to_row
from services.clients.wire import WireMessage, WireTap, to_jsonl

DEFAULT_RUN_TIMEOUT = 180.0
# How long the scored run watches, after the update, for the client to act on it.
DEFAULT_OBSERVE_SECONDS = 6.0
_DAEMON_STOP_TIMEOUT = 30.0
# A scored agent run holds the lab's own update of a subscriber back beyond the run:
# the runner applies the updates itself, after the model's one read (see Updates).
_HOLD_SECONDS = 3600.0
_SUBSCRIBED = (
    rf"\[(resources/subscribe|subscriptions/listen)\] uri={re.escape(REVIEW_STATUS.uri)} .*job="
)
_LATE_UPDATES = 3  # updates for subscribes that come after the first update, at most


class Updates:
    """The scored run's updates, applied by the runner. The first once the model's one
    read is back (the model's hook); then one more for each subscribe the lab logs
    after it (a client that subscribes late is updated as the lab would, after its
    subscribe). So no notification ever comes before the model's read, and every
    read after one is the client's own."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self._mark: int | None = None
        self._first = asyncio.Event()

    async def first(self) -> str:
        """Apply the first update (the model's hook)."""
        if self._mark is None:
            self._mark = len(self.lab.server.lines)
        line = await self.lab.publish_update()
        self._first.set()
        return line

    async def follow(self) -> None:
        """Update again for each later subscribe (run as a task, cancelled at the end)."""
        await self._first.wait()
        assert self._mark is not None
        index = self._mark
        for _ in range(_LATE_UPDATES):
            index = await self.lab.server.wait_for_index(_SUBSCRIBED, _HOLD_SECONDS, index) + 1
            await self.lab.publish_update()


@dataclass
class Outcome:
    """What one run produced, before it is turned into a row."""

    script: str  # SCORED or PULL
    started_ms: int
    events: list[contract.Event] = field(default_factory=list)
    record: ModelRecord | None = None
    wire: list[WireMessage] = field(default_factory=list)
    exit_code: int | None = None
    output: list[str] = field(default_factory=list)
    timed_out: bool = False
    # The continued turn (scored runs of agent CLIs): its exit code, None if not run.
    continued_exit: int | None = None
    # Versions the client printed (the Inspector's reads), in order.
    printed_versions: list[int] = field(default_factory=list)
    folder: Path | None = None


@dataclass(frozen=True)
class Installed:
    """A client ready to run: its binary, what goes first on PATH, how to drive it."""

    binary: Path
    paths: list[Path]
    driver: drivers.Driver | None  # None: the Inspector's own steps
    version: str


def _base_env(home: Path, extra_path: list[Path]) -> dict[str, str]:
    """A clean environment: nothing of the caller's but PATH, HOME of the run's own."""
    path = os.pathsep.join([*(str(p) for p in extra_path), os.environ.get("PATH", "")])
    env = {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(home / "tmp"),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    return env


async def _run_cli(
    name: str, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> tuple[Process, bool]:
    """Run a CLI to its end (or kill it after ``timeout``); returns it and whether it timed out."""
    process = await Process.start(name, argv, env, cwd)
    try:
        await asyncio.wait_for(process.process.wait(), timeout)
        timed_out = False
    except TimeoutError:
        timed_out = True
    await process.stop()
    return process, timed_out


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _run_agent(
    spec: ClientSpec,
    installed: Installed,
    root: Path,
    timeout: float,
    scenario: str,
    script: str,
    observe: float,
) -> Outcome:
    assert installed.driver is not None
    home, workdir = root / "home", root / "work"
    home.mkdir()
    workdir.mkdir()
    outcome = Outcome(script, _now_ms())
    hold = _HOLD_SECONDS if script == SCORED else None
    async with running_lab(root, scenario == TOOL_SCENARIO, hold) as lab:
        tap = WireTap(lab.base_url)
        updates = Updates(lab)
        model = ScriptedModel(
            drivers.SERVER_NAME,
            REVIEW_STATUS.uri,
            updates.first if script == SCORED else lab.publish_update,
            mode=script,
            observe_seconds=observe,
        )
        follow = asyncio.create_task(updates.follow()) if script == SCORED else None
        try:
            async with tap.serve() as tap_url, serve(model) as model_url:
                await _agent_turns(spec, installed, home, workdir, tap_url, model_url, model,
                                   timeout, outcome)  # fmt: skip
        finally:
            if follow is not None:
                follow.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await follow
        outcome.record = model.record
        outcome.wire = tap.messages
        outcome.events = await lab.events()
        outcome.folder = _keep_logs(spec, installed, scenario, lab, outcome, model.exchanges)
    return outcome


async def _agent_turns(
    spec: ClientSpec,
    installed: Installed,
    home: Path,
    workdir: Path,
    tap_url: str,
    model_url: str,
    model: ScriptedModel,
    timeout: float,
    outcome: Outcome,
) -> None:
    """The CLI's first turn, and in a scored run one continued turn of its session."""
    assert installed.driver is not None
    dirs = drivers.RunDirs(home, workdir, f"{tap_url}/mcp", model_url)
    env = _base_env(home, installed.paths)
    prompt = drivers.PROMPT if outcome.script == SCORED else drivers.PULL_PROMPT
    turn = installed.driver(str(installed.binary), dirs, prompt, False)
    outcome.started_ms = _now_ms()
    cli, outcome.timed_out = await _run_cli(
        spec.name, turn.argv, {**env, **turn.env}, workdir, timeout
    )
    outcome.exit_code = cli.process.returncode
    outcome.output = [f"$ {_shown(turn.argv)}", *cli.lines]
    if outcome.script == SCORED and not outcome.timed_out and model.record.requests:
        again = installed.driver(str(installed.binary), dirs, drivers.CONTINUE_PROMPT, True)
        later, late = await _run_cli(spec.name, again.argv, {**env, **again.env}, workdir, timeout)
        outcome.continued_exit = -1 if late else later.process.returncode
        outcome.output += [f"$ {_shown(again.argv)}", *later.lines]


def _shown(argv: list[str]) -> str:
    return " ".join(json.dumps(a) if " " in a else a for a in argv)


async def _run_inspector(
    spec: ClientSpec,
    installed: Installed,
    root: Path,
    timeout: float,
    scenario: str,
    script: str,
    observe: float,
) -> Outcome:
    """``mcpdo`` needs no model. Scored: connect, read, subscribe (it prints each update
    as it arrives), wait for the lab's own update of the subscriber, then watch for
    ``observe`` seconds whether it reads again by itself. Pull: connect, read, the
    runner's update, read again (the runner's command: never a level)."""
    home, workdir = root / "home", root / "work"
    home.mkdir()
    workdir.mkdir()
    env = {**_base_env(home, installed.paths), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    outcome = Outcome(script, _now_ms())
    async with running_lab(root, enable_tool=scenario == TOOL_SCENARIO) as lab:
        tap = WireTap(lab.base_url)
        async with tap.serve() as tap_url:
            mcpdo = [str(installed.binary), "--plain"]
            conn = ["--connection", drivers.SERVER_NAME]
            uri = REVIEW_STATUS.uri

            async def step(label: str, args: list[str]) -> bool:
                done, timed_out = await _run_cli(label, [*mcpdo, *args], env, workdir, timeout)
                outcome.output.extend([f"$ mcpdo {' '.join(args)}", *done.lines])
                outcome.printed_versions += versions_in("\n".join(done.lines))
                outcome.exit_code = done.process.returncode
                outcome.timed_out = outcome.timed_out or timed_out
                return not (outcome.exit_code or timed_out)

            outcome.started_ms = _now_ms()
            try:
                ok = await step(
                    "connect", ["connect", f"{tap_url}/mcp", "--transport", "http", *conn]
                )
                ok = ok and await step("read", [*conn, "resources/read", uri])
                if ok and script == SCORED:
                    await _inspector_subscribe(
                        lab, mcpdo, conn, env, workdir, timeout, observe, outcome
                    )
                elif ok:
                    await lab.publish_update()
                    await step("read", [*conn, "resources/read", uri])
            finally:
                stop, _ = await _run_cli(
                    "daemon", [*mcpdo, "daemon", "stop"], env, workdir, _DAEMON_STOP_TIMEOUT
                )
                outcome.output += ["$ mcpdo daemon stop", *stop.lines]
        outcome.wire = tap.messages
        outcome.events = await lab.events()
        outcome.folder = _keep_logs(spec, installed, scenario, lab, outcome, [])
    return outcome


async def _inspector_subscribe(
    lab: Lab,
    mcpdo: list[str],
    conn: list[str],
    env: dict[str, str],
    workdir: Path,
    timeout: float,
    observe: float,
    outcome: Outcome,
) -> None:
    """``resources/subscribe`` blocks and prints each update; the lab updates the
    subscriber after its delay. Once one update is printed, watch the lab's log for a
    read of the client's own for ``observe`` seconds, then stop the listener."""
    uri = REVIEW_STATUS.uri
    since = len(lab.server.lines)
    subscribe = await Process.start(
        "subscribe", [*mcpdo, *conn, "resources/subscribe", uri], env, workdir
    )
    try:
        await lab.server.wait_for(r"\[resources/subscribe\]", timeout, since)
        await subscribe.wait_for(r"Resource updated", timeout)
        printed = len(lab.server.lines)
        try:  # a read of its own after the update, if it makes one
            await lab.server.wait_for(r"\[resources/read\]", observe, printed)
        except TimeoutError:
            pass
    except TimeoutError:
        outcome.timed_out = True
    await subscribe.stop()
    outcome.output += [f"$ mcpdo {' '.join(conn)} resources/subscribe {uri}", *subscribe.lines]


def runs_dir(name: str, version: str, scenario: str, script: str) -> Path:
    """Where the last run of ``name@version`` in ``scenario`` keeps its logs."""
    return cache_dir() / "runs" / f"{name}-{version}" / scenario.replace(" ", "-") / script


def _keep_logs(
    spec: ClientSpec,
    installed: Installed,
    scenario: str,
    lab: Lab,
    outcome: Outcome,
    exchanges: list[dict[str, object]],
) -> Path:
    """The run's logs, evidence, wire capture and model requests, under the cache: for
    reading what happened by hand. Returns the folder."""
    where = runs_dir(spec.name, installed.version, scenario, outcome.script)
    if where.exists():
        for old in sorted(where.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() else old.unlink()
    (where / "requests").mkdir(parents=True, exist_ok=True)
    (where / "cli.log").write_text("\n".join(outcome.output) + "\n")
    (where / "server.log").write_text("\n".join(lab.server.lines) + "\n")
    (where / "updater.log").write_text("\n".join(lab.updater.lines) + "\n")
    lines = [json.dumps(asdict(e)) for e in outcome.events]
    (where / "events.jsonl").write_text("".join(f"{line}\n" for line in lines))
    (where / "wire.jsonl").write_text(to_jsonl(outcome.wire))
    if outcome.record is not None:
        (where / "model.json").write_text(json.dumps(outcome.record.to_json(), indent=2) + "\n")
    for exchange in exchanges:
        name = f"{exchange['request']:03d}-{exchange['api']}.json"
        (where / "requests" / name).write_text(json.dumps(exchange, indent=2) + "\n")
    return where


async def run_client(
    spec: ClientSpec,
    version: str,
    timeout: float,
    scenarios: tuple[str, ...] = SCENARIOS,
    *,
    observe: float = DEFAULT_OBSERVE_SECONDS,
    installed: Installed | None = None,
) -> list[Row]:
    """One client's rows, one per lab setup; a single row saying why when the runner
    could not install it (or it cannot be installed offline). ``installed``: a client
    that is already on disk (a test's own), with its driver."""
    if installed is None:
        if spec.not_installable or spec.package is None:
            why = spec.not_installable or "no package"
            return [Row(spec.name, version, "-", level=None, server_level=None, notes=[why])]
        try:
            version = await asyncio.to_thread(resolve_version, spec.package, version)
            binary, paths = await install(spec, version)
        except InstallError as exc:
            return [Row(spec.name, version, "-").fail(f"install failed: {exc}")]
        driver = drivers.AGENT_DRIVERS.get(spec.name) if spec.uses_model else None
        installed = Installed(binary, paths, driver, version)
    runner = _run_agent if installed.driver is not None else _run_inspector
    rows = []
    for scenario in scenarios:
        started = time.monotonic()
        outcomes: dict[str, Outcome | str] = {}
        for script in (SCORED, PULL):
            with tempfile.TemporaryDirectory(prefix=f"mcp-lab-{spec.name}-") as root:
                try:
                    outcomes[script] = await runner(
                        spec, installed, Path(root), timeout, scenario, script, observe
                    )
                except TimeoutError as exc:  # a lab that did not start (an OSError too)
                    outcomes[script] = f"the lab did not start: {exc}"
                except OSError as exc:  # the CLI would not start
                    outcomes[script] = f"could not run {installed.binary.name}: {exc}"
        row = to_row(spec, installed.version, scenario, outcomes[SCORED], outcomes[PULL])
        row.seconds = round(time.monotonic() - started, 1)
        rows.append(row)
    return rows


async def run_clients(
    names: list[str],
    versions: dict[str, str],
    timeout: float,
    scenarios: tuple[str, ...] = SCENARIOS,
    observe: float = DEFAULT_OBSERVE_SECONDS,
) -> list[Row]:
    """Rows of ``names`` in each lab setup, one run after the other (each run owns the
    machine while it runs)."""
    rows = []
    for name in names:
        spec = CLIENTS[name]
        version = versions.get(name, spec.version)
        rows += await run_client(spec, version, timeout, scenarios, observe=observe)
    return rows
