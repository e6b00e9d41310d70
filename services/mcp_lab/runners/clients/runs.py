"""One run of one client: a fresh lab playing a scenario, a wire tap in front of it,
the scripted model (agent CLIs), a HOME of the run's own, all on loopback.

- **scored**: the model reads the scenario's resource once (or finds it attached);
  when that result is back the runner applies the scenario's timeline (target ``*``);
  the model then takes neutral steps for a bounded time, answers, and the runner
  continues the same session once with the CLI's own continue flag. Nobody asks for
  the resource again: what the client does with the updates is its own.
- **pull**: the model reads, the update is applied, the model asks to read again.

The MCP Inspector's CLI (``mcpdo``) has no model: its scored run is connect, read,
subscribe and wait (the lab plays the timeline after the subscribe by itself); its
pull run is connect, read, update, read. A **program** (a client file of kind
``program``, or ``mcp-lab check --command``) has no model either: its one run starts
it once and lets it do the whole flow by itself, the lab playing the timeline after
its subscribe. :mod:`mcp_lab.runners.clients.verdict` turns the runs into a row.

Every run reaches the lab over the transport of its plan (:mod:`mcp_lab.runners.
lab_side`): HTTP through the wire tap, or stdio through a lab server the client
starts behind the stdio tap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mcp_lab import contract, protocol
from mcp_lab.evidence.build import Report
from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.configs import SERVER_NAME, Server
from mcp_lab.runners.clients.definition import HTTP, STDIO, ClientDef
from mcp_lab.runners.clients.endpoint import serve
from mcp_lab.runners.clients.install import Installed
from mcp_lab.runners.clients.model import SCORED, ModelRecord, ScriptedModel, versions_in
from mcp_lab.runners.clients.terminal import (
    KEY_BACKSPACE,
    KEY_CTRL_D,
    KEY_ENTER,
    Terminal,
    loosely,
)
from mcp_lab.runners.lab import RunLab, running_lab
from mcp_lab.runners.lab_side import LabSide, reach
from mcp_lab.runners.phases import CLIENT_START, OBSERVE, SCENARIO, TEARDOWN, Clock
from mcp_lab.runners.program import Process, base_env
from mcp_lab.runners.wire import WireMessage, to_jsonl
from mcp_lab.scenarios.scenario import UPDATE, Scenario

DEFAULT_RUN_TIMEOUT = 180.0
# How long the scored run watches, after the update, for the client to act on it
# (plus the time the scenario's timeline takes).
DEFAULT_OBSERVE_SECONDS = 6.0
_DAEMON_STOP_TIMEOUT = 30.0
# A scored agent run holds the lab's own timeline after a subscribe back beyond the
# run: the runner applies it itself, after the model's one read (see Updates).
_HOLD_SECONDS = 3600.0
_LATE_TIMELINES = 3  # timelines for subscribes that come after the first one, at most
# The interactive UI (attached scenario): its prompt box is ready when its footer is
# drawn; a mention is offered with the resource's description; bounded waits.
_READY = r"for\s*shortc"
_OFFER_CHARS = 16
_OFFER_TRIES = 3  # after these, Enter resolves the mention all the same
_OFFER_SECONDS = 2.0
_BEFORE_ENTER_SECONDS = 0.5
_EXIT_SECONDS = 10.0
NO_TOOL, TOOL = "no tool", "tool"  # the lab setups: without or with the lab's tool


@dataclass(frozen=True)
class RunPlan:
    """What one run is: the scenario, the lab setup, the script."""

    scenario: Scenario
    setup: str  # NO_TOOL or TOOL
    script: str  # SCORED or PULL
    observe: float = DEFAULT_OBSERVE_SECONDS
    timeout: float = DEFAULT_RUN_TIMEOUT
    transport: str = HTTP  # how the client reaches the lab: HTTP or STDIO

    @property
    def uri(self) -> str:
        return self.scenario.read_uri

    @property
    def window(self) -> float:
        """How long the scored run watches after the first update: the timeline's
        span plus ``observe``."""
        return self.observe + max((a.after for a in self.scenario.timeline), default=0.0)


class Updates:
    """The scored run's updates, applied by the runner: the scenario's timeline once
    the model's one read is back (the model's hook); then again for each subscribe the
    lab logs after that (a client that subscribes late is played the timeline as the
    lab would, after its subscribe). So no notification ever comes before the model's
    read, and every read after one is the client's own."""

    def __init__(self, lab: RunLab, side: LabSide) -> None:
        self.lab = lab
        self.side = side  # the log of the server the client talks to
        self._mark: int | None = None
        self._first = asyncio.Event()
        uri = re.escape(lab.scenario.read_uri)
        self._subscribed = rf"\[(resources/subscribe|subscriptions/listen)\] uri={uri} .*job="

    async def first(self) -> str:
        """Apply the timeline (the model's hook)."""
        if self._mark is None:
            self._mark = len(self.side.lines)
        line = await self.lab.apply_timeline()
        self._first.set()
        return line

    async def follow(self) -> None:
        """The timeline again for each later subscribe (a task, cancelled at the end)."""
        await self._first.wait()
        assert self._mark is not None
        index = self._mark
        for _ in range(_LATE_TIMELINES):
            index = await self.side.wait_for_index(self._subscribed, _HOLD_SECONDS, index)
            index += 1
            await self.lab.apply_timeline()


@dataclass
class Outcome:
    """What one run produced, before it is turned into a row."""

    plan: RunPlan
    started_ms: int
    events: list[contract.Event] = field(default_factory=list)
    report: Report | None = None  # the lab's report of the run
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
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase

    @property
    def script(self) -> str:
        return self.plan.script


async def _run_cli(
    name: str, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> tuple[Process, bool]:
    """Run a CLI to its end (or kill it after ``timeout``); returns it and whether it timed out."""
    process = await Process.start(name, argv, env, cwd)
    timed_out = False
    try:
        await asyncio.wait_for(process.process.wait(), timeout)
    except TimeoutError:
        timed_out = True
    finally:  # cancelled too: the client stops before its lab does
        await process.stop()
    return process, timed_out


def _now_ms() -> int:
    return int(time.time() * 1000)


def _dirs(root: Path) -> tuple[Path, Path]:
    home, workdir = root / "home", root / "work"
    home.mkdir()
    workdir.mkdir()
    return home, workdir


@contextlib.asynccontextmanager
async def _phases(clock: Clock, lab: RunLab, side: LabSide) -> AsyncIterator[None]:
    """Mark the client's start now, and, as the lab sees them, its first initialize
    (the scenario begins) and the first update applied (the observe window begins);
    the teardown once the block (the client's turns) is over."""
    clock.mark(CLIENT_START)

    async def watch() -> None:
        await side.wait_for(r"\[(initialize|server/discover)\]", _HOLD_SECONDS)
        clock.mark(SCENARIO)
        await lab.updater.wait_for(r" published=", _HOLD_SECONDS)
        clock.mark(OBSERVE)

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        clock.mark(TEARDOWN)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await task


def _http(plan: RunPlan) -> bool:
    """Whether the run's lab serves HTTP (a stdio client starts the lab's server)."""
    return plan.transport == HTTP


def _run_dirs(
    home: Path, workdir: Path, side: LabSide, model_url: str = ""
) -> drivers.RunDirs:
    """The run's directories and endpoints, the lab as ``side`` offers it."""
    return drivers.RunDirs(home, workdir, side.url, model_url, Server(command=side.command))


async def run_agent(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: RunPlan,
    folder: Path,
    clock: Clock | None = None,
) -> Outcome:
    """One run of an agent CLI (see the module docstring); its files kept in ``folder``."""
    assert installed.driver is not None
    home, workdir = _dirs(root)
    outcome = Outcome(plan, _now_ms())
    hold = _HOLD_SECONDS if plan.script == SCORED else None
    async with (
        running_lab(root, plan.setup == TOOL, hold, plan.scenario, _http(plan)) as lab,
        reach(lab, plan.transport, root / "lab-side") as side,
    ):
        updates = Updates(lab, side)
        model = ScriptedModel(
            SERVER_NAME,
            plan.uri,
            updates.first if plan.script == SCORED else lab.apply_timeline,
            mode=plan.script,
            observe_seconds=plan.window,
            attach=plan.scenario.play.attach and plan.script == SCORED,
            list_templates=plan.scenario.play.list_templates,
        )
        follow = asyncio.create_task(updates.follow()) if plan.script == SCORED else None
        try:
            async with serve(model) as model_url, _phases(clock or Clock(), lab, side):
                dirs = _run_dirs(home, workdir, side, model_url)
                await _agent_turns(spec, installed, dirs, model, outcome)
        finally:
            if follow is not None:
                follow.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await follow
        outcome.record = model.record
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = _keep_logs(folder, lab, side, outcome, model.exchanges)
    return outcome


async def _agent_turns(
    spec: ClientDef,
    installed: Installed,
    dirs: drivers.RunDirs,
    model: ScriptedModel,
    outcome: Outcome,
) -> None:
    """The CLI's first turn, and in a scored run one continued turn of its session."""
    assert installed.driver is not None
    plan = outcome.plan
    env = base_env(dirs.home, installed.paths)
    if plan.script == SCORED:
        prompt = plan.scenario.play.prompt.format(uri=plan.uri)
    else:
        prompt = drivers.PULL_PROMPT.format(uri=plan.uri)
    turn = installed.driver(str(installed.binary), dirs, prompt, False)
    outcome.started_ms = _now_ms()
    cli, outcome.timed_out = await _run_cli(
        spec.name, turn.argv, {**env, **turn.env}, dirs.workdir, plan.timeout
    )
    outcome.exit_code = cli.process.returncode
    outcome.output = [f"$ {_shown(turn.argv)}", *cli.lines]
    if plan.script == SCORED and not outcome.timed_out and model.record.requests:
        again = installed.driver(str(installed.binary), dirs, drivers.CONTINUE_PROMPT, True)
        later, late = await _run_cli(
            spec.name, again.argv, {**env, **again.env}, dirs.workdir, plan.timeout
        )
        outcome.continued_exit = -1 if late else later.process.returncode
        outcome.output += [f"$ {_shown(again.argv)}", *later.lines]


async def run_program(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: RunPlan,
    folder: Path,
    clock: Clock | None = None,
) -> Outcome:
    """One run of a program with no model: started once, told where the lab is
    (``{url}`` or ``{server_command}``, and ``MCP_LAB_URL`` / ``MCP_LAB_SERVER_COMMAND``),
    it does the whole flow by itself until it exits (killed after the plan's timeout);
    the lab plays the scenario's timeline after its subscribe. It runs in the folder of
    its client file (a command: where ``mcp-lab check`` runs), so its relative paths
    hold. Its files kept in ``folder``."""
    assert installed.driver is not None
    home, workdir = _dirs(root)
    outcome = Outcome(plan, _now_ms())
    async with (
        running_lab(root, plan.setup == TOOL, None, plan.scenario, _http(plan)) as lab,
        reach(lab, plan.transport, root / "lab-side") as side,
    ):
        dirs = _run_dirs(home, workdir, side)
        turn = installed.driver(str(installed.binary), dirs, "", False)
        env = {**base_env(home, installed.paths), **turn.env}
        outcome.started_ms = _now_ms()
        async with _phases(clock or Clock(), lab, side):  # in its own folder: its paths hold
            done, outcome.timed_out = await _run_cli(
                spec.name, turn.argv, env, Path(spec.here), plan.timeout
            )
        outcome.exit_code = done.process.returncode
        outcome.output = [f"$ {_shown(turn.argv)}", *done.lines]
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = _keep_logs(folder, lab, side, outcome, [])
    return outcome


async def run_interactive(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: RunPlan,
    interactive: Callable[[str, drivers.RunDirs], drivers.Invocation],
    folder: Path,
    clock: Clock | None = None,
) -> Outcome:
    """A scored run in the CLI's interactive UI, under a pseudo-terminal: the resource
    is attached by typing its mention (``@lab:URI``) into the prompt box, as a person
    would; then one more message in the same session, and the CLI is left (Ctrl-D).
    Its files are kept in ``folder``."""
    home, workdir = _dirs(root)
    outcome = Outcome(plan, _now_ms())
    async with (
        running_lab(root, plan.setup == TOOL, _HOLD_SECONDS, plan.scenario, _http(plan)) as lab,
        reach(lab, plan.transport, root / "lab-side") as side,
    ):
        updates = Updates(lab, side)
        model = ScriptedModel(
            SERVER_NAME,
            plan.uri,
            updates.first,
            mode=SCORED,
            observe_seconds=plan.window,
            attach=True,
        )
        follow = asyncio.create_task(updates.follow())
        try:
            async with serve(model) as model_url, _phases(clock or Clock(), lab, side):
                dirs = _run_dirs(home, workdir, side, model_url)
                started = interactive(str(installed.binary), dirs)
                env = {**base_env(home, installed.paths), **started.env}
                outcome.started_ms = _now_ms()
                term = await Terminal.start(started.argv, env, workdir)
                try:
                    await _converse(term, side, model, plan, outcome)
                finally:
                    outcome.exit_code = await term.stop()
                    outcome.output = [f"$ {_shown(started.argv)}", *term.text.splitlines()]
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await follow
        outcome.record = model.record
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = _keep_logs(folder, lab, side, outcome, model.exchanges)
    return outcome


async def _converse(
    term: Terminal, side: LabSide, model: ScriptedModel, plan: RunPlan, outcome: Outcome
) -> None:
    """Type the scenario's prompt (its ``@lab:URI`` mention a key at a time, until the
    UI offers the resource), then a second message; each turn ends when the model has
    answered. Leaves the CLI with Ctrl-D twice. A step that does not come in time ends
    the conversation (``timed_out``)."""
    since = len(side.lines)
    try:
        await side.wait_for(r"\[resources/list\]", plan.timeout, since)
    except TimeoutError:
        outcome.timed_out = True
        return
    if not await term.wait_for(_READY, plan.timeout):
        outcome.timed_out = True
        return
    prompt = plan.scenario.play.prompt.format(uri=plan.uri)
    mention = f"@{SERVER_NAME}:{plan.uri}"
    offered = loosely(plan.scenario.catalog[plan.uri].description[:_OFFER_CHARS])
    mark = term.mark()
    await term.type(mention)
    for _ in range(_OFFER_TRIES):  # the offer may not come for the first keys typed
        if await term.wait_for(offered, _OFFER_SECONDS, mark):
            break
        term.press(KEY_BACKSPACE)
        await term.type(mention[-1])
    for text, turn in ((prompt.removeprefix(mention), 1), (drivers.CONTINUE_PROMPT, 2)):
        await term.type(text)
        await asyncio.sleep(_BEFORE_ENTER_SECONDS)  # the UI settles the typed text
        term.press(KEY_ENTER)
        if not await model.answered(turn, plan.window + plan.timeout):
            outcome.timed_out = True
            return
    outcome.continued_exit = 0
    mark = term.mark()
    term.press(KEY_CTRL_D)
    await term.wait_for(r"again\s*to\s*exit", _EXIT_SECONDS, mark)
    term.press(KEY_CTRL_D)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(term.process.wait(), _EXIT_SECONDS)


def _shown(argv: list[str]) -> str:
    return " ".join(json.dumps(a) if " " in a else a for a in argv)


async def run_inspector(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: RunPlan,
    folder: Path,
    clock: Clock | None = None,
) -> Outcome:
    """``mcpdo`` needs no model. Scored: connect, read, subscribe (it prints each update
    as it arrives), wait for the lab's own first update of the subscriber, then watch
    for the timeline's span plus ``observe`` seconds whether it reads again by itself.
    Pull: connect, read, the runner's update, read again (the runner's command: never
    a level). Over stdio it starts the lab's stdio server itself (``connect --transport
    stdio -- CMD``). Its files are kept in ``folder``."""
    home, workdir = _dirs(root)
    env = {**base_env(home, installed.paths), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    outcome = Outcome(plan, _now_ms())
    async with (
        running_lab(root, plan.setup == TOOL, None, plan.scenario, _http(plan)) as lab,
        reach(lab, plan.transport, root / "lab-side") as side,
    ):
        mcpdo = [str(installed.binary), "--plain"]
        conn = ["--connection", SERVER_NAME]

        async def step(label: str, args: list[str]) -> bool:
            done, timed_out = await _run_cli(label, [*mcpdo, *args], env, workdir, plan.timeout)
            outcome.output.extend([f"$ mcpdo {' '.join(args)}", *done.lines])
            outcome.printed_versions += versions_in("\n".join(done.lines))
            outcome.exit_code = done.process.returncode
            outcome.timed_out = outcome.timed_out or timed_out
            return not (outcome.exit_code or timed_out)

        outcome.started_ms = _now_ms()
        if side.transport == STDIO:
            target = ["--transport", "stdio", *conn, "--", *side.command]
        else:
            target = [side.url, "--transport", "http", *conn]
        async with _phases(clock or Clock(), lab, side):
            try:
                ok = await step("connect", ["connect", *target])
                ok = ok and await step("read", [*conn, protocol.READ, plan.uri])
                if ok and plan.script == SCORED:
                    await _inspector_subscribe(side, mcpdo, conn, env, workdir, plan, outcome)
                elif ok:
                    await lab.apply_timeline()
                    await step("read", [*conn, protocol.READ, plan.uri])
            finally:
                stop, _ = await _run_cli(
                    "daemon", [*mcpdo, "daemon", "stop"], env, workdir, _DAEMON_STOP_TIMEOUT
                )
                outcome.output += ["$ mcpdo daemon stop", *stop.lines]
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = _keep_logs(folder, lab, side, outcome, [])
    return outcome


async def _inspector_subscribe(
    side: LabSide,
    mcpdo: list[str],
    conn: list[str],
    env: dict[str, str],
    workdir: Path,
    plan: RunPlan,
    outcome: Outcome,
) -> None:
    """``resources/subscribe`` blocks and prints each update; the lab plays its timeline
    after the subscribe. Once one update is printed, watch the lab's log for a read of
    the client's own for the timeline's span plus ``observe`` seconds, then stop the
    listener (it unsubscribes as it stops)."""
    since = len(side.lines)
    subscribe = await Process.start(
        "subscribe", [*mcpdo, *conn, protocol.SUBSCRIBE, plan.uri], env, workdir
    )
    updates = any(a.kind == UPDATE and a.uri in (None, plan.uri) for a in plan.scenario.timeline)
    try:
        await side.wait_for(r"\[resources/subscribe\]", plan.timeout, since)
        if updates:  # it prints each update of the resource it listens to
            await subscribe.wait_for(r"Resource updated", plan.timeout)
        printed = len(side.lines)
        with contextlib.suppress(TimeoutError):  # a request of its own, if it makes one
            await side.wait_for(r"\[resources/(read|list)\]", plan.window, printed)
    except TimeoutError:
        outcome.timed_out = True
    await subscribe.stop()
    outcome.output += [f"$ mcpdo {' '.join(conn)} resources/subscribe {plan.uri}", *subscribe.lines]


def runs_dir(runs: Path, name: str, version: str, plan: RunPlan) -> Path:
    """Where the run of ``name@version`` with ``plan`` keeps its files, in ``runs`` (its
    invocation's folder, :mod:`mcp_lab.runners.run_folders`)."""
    setup = plan.setup.replace(" ", "-")
    if plan.transport != HTTP:
        setup = f"{setup}-{plan.transport}"
    return runs / f"{name}-{version}" / plan.scenario.name / setup / plan.script


def _keep_logs(
    where: Path,
    lab: RunLab,
    side: LabSide,
    outcome: Outcome,
    exchanges: list[dict[str, object]],
) -> Path:
    """The run's logs, evidence, wire capture and model requests, in ``where``: for
    reading what happened by hand. Returns the folder."""
    if where.exists():
        for old in sorted(where.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() else old.unlink()
    (where / "requests").mkdir(parents=True, exist_ok=True)
    (where / "cli.log").write_text("\n".join(outcome.output) + "\n")
    if lab.server is not None:
        (where / "server.log").write_text("\n".join(lab.server.lines) + "\n")
    if side.transport == STDIO:  # the server the client started
        (where / "stdio-server.log").write_text("\n".join(side.lines) + "\n")
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
