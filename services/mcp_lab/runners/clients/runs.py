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

This module holds what a run is (:class:`ClientPlan`, :class:`ClientOutcome`), the scored run's
updates (:class:`Updates`) and the kit every run shares (a CLI run to its end, the
run's directories, its phases, where it keeps its files); the runs themselves are
:mod:`mcp_lab.runners.clients.agent_runs` (agent CLIs, and their interactive UI),
:mod:`mcp_lab.runners.clients.inspector_runs` and
:mod:`mcp_lab.runners.clients.program_runs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mcp_lab import contract
from mcp_lab.evidence.build import Report
from mcp_lab.runners import stdio_tap
from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.configs import Server
from mcp_lab.runners.clients.definition import HTTP, STDIO
from mcp_lab.runners.clients.model import ModelRecord
from mcp_lab.runners.lab import RunLab
from mcp_lab.runners.lab_side import LabSide
from mcp_lab.runners.phases import CLIENT_START, OBSERVE, SCENARIO, TEARDOWN, Clock
from mcp_lab.runners.program import CLIENT_LINES, Process
from mcp_lab.runners.wire import WireMessage, to_jsonl
from mcp_lab.scenarios.scenario import Scenario

DEFAULT_RUN_TIMEOUT = 180.0
# How long the scored run watches, after the update, for the client to act on it
# (plus the time the scenario's timeline takes).
DEFAULT_OBSERVE_SECONDS = 6.0
# A scored agent run holds the lab's own timeline after a subscribe back beyond the
# run: the runner applies it itself, after the model's one read (see Updates).
HOLD_SECONDS = 3600.0
_LATE_TIMELINES = 3  # timelines for subscribes that come after the first one, at most
NO_TOOL, TOOL = "no tool", "tool"  # the lab setups: without or with the lab's tool


@dataclass(frozen=True)
class ClientPlan:
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
    def folder_parts(self) -> tuple[str, ...]:
        """Where in its client version's folder the run keeps its files
        (:func:`mcp_lab.runners.run_folders.run_dir`): scenario, setup (and transport
        other than HTTP), script."""
        setup = self.setup.replace(" ", "-")
        if self.transport != HTTP:
            setup = f"{setup}-{self.transport}"
        return (self.scenario.name, setup, self.script)

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
            index = await self.side.wait_for_index(self._subscribed, HOLD_SECONDS, index)
            index += 1
            await self.lab.apply_timeline()


@dataclass
class ClientOutcome:
    """What one run produced, before it is turned into a row."""

    plan: ClientPlan
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
    # What the stdio tap could not pass as messages (lines that are no JSON-RPC, lines
    # past its limit), as the row's notes say it (stdio_tap.row_notes); over stdio only.
    tap_notes: list[str] = field(default_factory=list)

    @property
    def script(self) -> str:
        return self.plan.script


async def run_cli(
    name: str, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> tuple[Process, bool]:
    """Run a CLI to its end (or kill it after ``timeout``); returns it and whether it timed out."""
    # A client's output is its own: held bounded (the first and newest lines, a count).
    process = await Process.start(name, argv, env, cwd, keep=CLIENT_LINES)
    timed_out = False
    try:
        await asyncio.wait_for(process.process.wait(), timeout)
    except TimeoutError:
        timed_out = True
    finally:  # cancelled too: the client stops before its lab does
        await process.stop()
    return process, timed_out


def now_ms() -> int:
    return int(time.time() * 1000)


def make_dirs(root: Path) -> tuple[Path, Path]:
    home, workdir = root / "home", root / "work"
    home.mkdir()
    workdir.mkdir()
    return home, workdir


@contextlib.asynccontextmanager
async def marking_phases(clock: Clock, lab: RunLab, side: LabSide) -> AsyncIterator[None]:
    """Mark the client's start now, and, as the lab sees them, its first initialize
    (the scenario begins) and the first update applied (the observe window begins);
    the teardown once the block (the client's turns) is over."""
    clock.mark(CLIENT_START)

    async def watch() -> None:
        await side.wait_for(r"\[(initialize|server/discover)\]", HOLD_SECONDS)
        clock.mark(SCENARIO)
        await lab.updater.wait_for(r" published=", HOLD_SECONDS)
        clock.mark(OBSERVE)

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        clock.mark(TEARDOWN)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await task


def serves_http(plan: ClientPlan) -> bool:
    """Whether the run's lab serves HTTP (a stdio client starts the lab's server)."""
    return plan.transport == HTTP


def run_dirs(home: Path, workdir: Path, side: LabSide, model_url: str = "") -> drivers.RunDirs:
    """The run's directories and endpoints, the lab as ``side`` offers it."""
    return drivers.RunDirs(home, workdir, side.url, model_url, Server(command=side.command))


def shown(argv: list[str]) -> str:
    return " ".join(json.dumps(a) if " " in a else a for a in argv)


def keep_logs(
    where: Path,
    lab: RunLab,
    side: LabSide,
    outcome: ClientOutcome,
    exchanges: list[dict[str, object]],
) -> Path:
    """The run's logs, evidence, wire capture and model requests, in ``where``: for
    reading what happened by hand. Returns the folder. Over stdio, what the tap said of
    lines it could not pass as messages goes into ``outcome.tap_notes`` too."""
    if where.exists():
        for old in sorted(where.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() else old.unlink()
    (where / "requests").mkdir(parents=True, exist_ok=True)
    (where / "cli.log").write_text("\n".join(outcome.output) + "\n")
    if lab.server is not None:
        (where / "server.log").write_text("\n".join(lab.server.lines) + "\n")
    if side.transport == STDIO:  # the server the client started
        (where / "stdio-server.log").write_text("\n".join(side.lines) + "\n")
        outcome.tap_notes = stdio_tap.row_notes(side.lines)
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
