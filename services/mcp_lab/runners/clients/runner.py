"""``mcp-lab clients run``: real agent CLIs against fresh labs, offline.

For each client (a client file, :mod:`mcp_lab.runners.clients.definition`; installed once
per version, :mod:`mcp_lab.runners.clients.install`), each transport it supports (or
the one asked for) and each scenario that applies to it (:mod:`mcp_lab.scenarios`), the
runner makes the runs of :mod:`mcp_lab.runners.clients.runs`: a scored run per lab setup
(``no tool``, and ``tool`` where the scenario asks for both), plus a pull run where the
scenario has one (agent CLIs and the Inspector).
:mod:`mcp_lab.runners.clients.verdict` turns them into a matrix row. Clients run side by
side, ``jobs`` at a time (each run has a lab and loopback ports of its own); one
client's runs go one after the other.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from mcp_lab.runners.clients import drivers, verdict
from mcp_lab.runners.clients.agent_runs import run_agent, run_interactive
from mcp_lab.runners.clients.definition import COMMAND, INSPECTOR, LIBRARY, PROGRAM, ClientDef
from mcp_lab.runners.clients.inspector_runs import run_inspector
from mcp_lab.runners.clients.install import Installed, install_client
from mcp_lab.runners.clients.matrix import ClientRow
from mcp_lab.runners.clients.model import PULL, SCORED
from mcp_lab.runners.clients.program_runs import run_program
from mcp_lab.runners.clients.runs import (
    DEFAULT_OBSERVE_SECONDS,
    DEFAULT_RUN_TIMEOUT,
    NO_TOOL,
    TOOL,
    ClientOutcome,
    ClientPlan,
)
from mcp_lab.runners.clients.verdict import client_row
from mcp_lab.runners.install import InstallError
from mcp_lab.runners.phases import OBSERVE, Clock, heartbeat
from mcp_lab.runners.program import run_folder
from mcp_lab.runners.progress import DEFAULT_JOBS, Progress, on_stderr, quiet
from mcp_lab.runners.run_folders import run_dir
from mcp_lab.scenarios.scenario import Scenario

# ``--tool``: which lab setups each scenario runs in. "auto": both where the scenario
# asks for both (single), else without the lab's tool.
TOOL_CHOICES = ("auto", "off", "on", "both")
say_clients = on_stderr("clients")
_OVER_SECONDS = 5.0  # past the observe window, a heartbeat says the client still runs


def setups(scenario: Scenario, tool: str) -> tuple[str, ...]:
    if tool == "off":
        return (NO_TOOL,)
    if tool == "on":
        return (TOOL,)
    if tool == "both" or scenario.play.tool_setups:
        return (NO_TOOL, TOOL)
    return (NO_TOOL,)


def applies(scenario: Scenario, spec: ClientDef) -> bool:
    """Whether ``scenario`` is played with ``spec`` (an empty list: every client)."""
    return not scenario.play.clients or spec.name in scenario.play.clients


class Tally:
    """How far a run of many rows is: each row's line says "row k of N" and about how
    long the rest takes (the rows done so far, on average, ``jobs`` at a time)."""

    def __init__(self, total: int, jobs: int) -> None:
        self.total = max(1, total)
        self.jobs = max(1, jobs)
        self.done = 0
        self._seconds = 0.0

    def count(self, row: ClientRow) -> str:
        self.done += 1
        self._seconds += row.seconds
        left = self.total - self.done
        if left <= 0:
            return f"row {self.done} of {self.total}"
        estimate = self._seconds / self.done * left / min(self.jobs, left)
        return f"row {self.done} of {self.total}, about {_duration(estimate)} left"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def count_rows(spec: ClientDef, scenarios: list[Scenario], tool: str, transport: str | None) -> int:
    """How many rows ``spec`` will have (one when it cannot run at all)."""
    if spec.not_installable or spec.package is None:
        return 1
    if transport is not None and transport not in spec.transports:
        return 1
    per_way = sum(len(setups(s, tool)) for s in scenarios if applies(s, spec))
    return max(1, per_way * len(transports_of(spec, transport)))


def transports_of(spec: ClientDef, asked: str | None) -> tuple[str, ...]:
    """The transports a client runs over: the one asked for, or every one it supports."""
    return (asked,) if asked is not None else spec.transports


async def run_client(
    spec: ClientDef,
    version: str,
    scenarios: list[Scenario],
    *,
    runs: Path,
    tool: str = "auto",
    observe: float = DEFAULT_OBSERVE_SECONDS,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    installed: Installed | None = None,
    progress: Progress = quiet,
    transport: str | None = None,
    tally: Tally | None = None,
    gate: asyncio.Semaphore | None = None,
    finished: list[ClientRow] | None = None,
    reinstall: bool = False,
) -> list[ClientRow]:
    """One client's rows, one per transport, scenario and lab setup that apply, in that
    order; a single row saying why when the runner could not install it (or it cannot
    be installed offline, or does not speak ``transport``). ``runs``: the invocation's
    folder (:mod:`mcp_lab.runners.run_folders`), where each run keeps its files.
    ``installed``: a client that is already on disk (a test's own), with its driver.
    ``gate``: how many rows run at once, shared with other clients (default: one);
    each row has a lab, a HOME and ports of its own. ``finished``: each row is also
    added there as soon as it is made (what a Ctrl-C keeps). ``reinstall``: install it
    again over its cached install (a command on this machine is only found)."""
    done = finished if finished is not None else []

    def alone(row: ClientRow) -> list[ClientRow]:
        done.append(row)
        return [row]

    if transport is not None and transport not in spec.transports:
        why = f"does not support {transport} (its file says {', '.join(spec.transports)})"
        row = ClientRow(spec.name, version, "-", "-", level=None, server_level=None, notes=[why])
        return alone(row)
    if installed is None:
        if spec.not_installable or spec.package is None:
            why = spec.not_installable or "no package"
            return alone(
                ClientRow(spec.name, version, "-", "-", level=None, server_level=None, notes=[why])
            )
        started = time.monotonic()
        # A command on this machine (a client file's [install] command, --command) is
        # found, not installed: no install lines, and a missing one is "not found".
        local = spec.source == COMMAND
        try:
            if local:
                installed = await install_client(spec, version)
            else:
                doing = f"{spec.name} {version}: {'reinstalling' if reinstall else 'installing'}"
                progress(doing)
                async with heartbeat(Clock(), progress, doing):
                    installed = await install_client(spec, version, reinstall)
        except InstallError as exc:
            failed = "command not found" if local else "install failed"
            progress(f"{spec.name} {version}: {failed}")
            return alone(ClientRow(spec.name, version, "-", "-").fail(f"{failed}: {exc}"))
        install_seconds = 0.0 if local else round(time.monotonic() - started, 1)
        if not local:
            progress(f"{spec.name} {installed.version}: installed ({install_seconds:.0f} s)")
    else:
        install_seconds = 0.0
    plans = [
        _Plan(scenario, setup, way, observe, timeout)
        for way in transports_of(spec, transport)
        for scenario in scenarios
        if applies(scenario, spec)
        for setup in setups(scenario, tool)
    ]
    gate = gate or asyncio.Semaphore(1)
    ready = installed

    async def one(index: int, plan: _Plan) -> ClientRow:
        where = f"{spec.name} {ready.version} {plan.scenario.name} ({plan.setup}, {plan.transport})"
        async with gate:
            row, stopped = await _row(spec, ready, plan, runs, progress, where)
        if index == 0 and install_seconds:
            row.phases["install"] = {"install": install_seconds}
        done.append(row)
        level = "-" if row.level is None else str(row.level)
        counted = f"; {tally.count(row)}" if tally is not None else ""
        spent = ", ".join(f"{k} {v:.0f} s" for k, v in _summed(row).items() if v >= 1)
        ended = "".join(f"; the {script} run {verdict.stopped(plan.timeout)}" for script in stopped)
        progress(f"{where}: level {level} in {row.seconds:.0f} s ({spent}){ended}{counted}")
        return row

    return list(await asyncio.gather(*(one(i, plan) for i, plan in enumerate(plans))))


def _summed(row: ClientRow) -> dict[str, float]:
    """Seconds per phase over the row's runs."""
    total: dict[str, float] = {}
    for phases in row.phases.values():
        for name, seconds in phases.items():
            total[name] = total.get(name, 0.0) + seconds
    return total


@dataclass(frozen=True)
class _Plan:
    scenario: Scenario
    setup: str
    transport: str
    observe: float
    timeout: float


async def _row(
    spec: ClientDef,
    installed: Installed,
    planned: _Plan,
    runs: Path,
    progress: Progress,
    where: str,
) -> tuple[ClientRow, list[str]]:
    """The runs of one row (scored, and pull where the scenario has one): its row, and
    the runs whose client did not exit by itself (stopped at the timeout)."""
    started = time.monotonic()
    scenario = planned.scenario
    pull = scenario.play.pull and spec.kind not in (PROGRAM, LIBRARY)
    scripts = (SCORED, PULL) if pull else (SCORED,)
    outcomes: dict[str, ClientOutcome | str] = {}
    phases: dict[str, dict[str, float]] = {}
    stopped: list[str] = []
    for script in scripts:
        plan = ClientPlan(scenario, planned.setup, script, planned.observe, planned.timeout,
                       planned.transport)  # fmt: skip
        folder = run_dir(runs, spec.name, installed.version, plan.folder_parts)
        clock = Clock()
        label = f"{where} {script} run"
        with run_folder(spec.name, progress, label) as root:
            try:
                async with heartbeat(clock, _beat(progress, clock, plan), label):
                    outcome = await _run(spec, installed, root, plan, folder, clock)
                outcomes[script] = outcome
                if outcome.timed_out:
                    stopped.append(script)
            except TimeoutError as exc:  # a lab that did not start (an OSError too)
                outcomes[script] = f"the lab did not start: {exc}"
            except OSError as exc:  # the client would not start
                outcomes[script] = f"could not run {installed.binary.name}: {exc}"
        phases[script] = _spent(clock.durations(), plan, script in stopped)
    row = client_row(spec, installed.version, scenario, planned.setup, outcomes)
    row.transport = planned.transport
    row.phases = phases
    row.seconds = round(time.monotonic() - started, 1)
    return row, stopped


# A run's time past its observe window, when its client did not exit by itself.
NOT_EXITED = "did not exit"


def _beat(progress: Progress, clock: Clock, plan: ClientPlan) -> Progress:
    """The heartbeat's lines, said as they are until the observe window is over; then
    as what it is: the client still runs, until it exits or the timeout stops it."""

    def say(line: str) -> None:
        if clock.phase != OBSERVE or clock.since() <= plan.window + _OVER_SECONDS:
            progress(line)
            return
        label = line.rsplit(f": {clock.phase} (", 1)[0]
        over = clock.since() - plan.window
        progress(f"{label}: the observe window ({plan.window:g} s) ended {over:.0f} s ago "
                 f"and the client has not exited (stopped at --timeout {plan.timeout:g} s "
                 "if it does not)")  # fmt: skip

    return say


def _spent(durations: dict[str, float], plan: ClientPlan, stopped: bool) -> dict[str, float]:
    """Seconds per phase of one run; of a client stopped at the timeout, its observe
    phase is the window, and the rest is :data:`NOT_EXITED`."""
    seen = durations.get(OBSERVE, 0.0)
    if not stopped or seen <= plan.window:
        return durations
    spent: dict[str, float] = {}
    for phase, seconds in durations.items():  # in order: it comes right after observe
        spent[phase] = round(plan.window, 1) if phase == OBSERVE else seconds
        if phase == OBSERVE:
            spent[NOT_EXITED] = round(seen - plan.window, 1)
    return spent


async def _run(
    spec: ClientDef, installed: Installed, root: Path, plan: ClientPlan, folder: Path, clock: Clock
) -> ClientOutcome:
    """One run, by the kind of client and scenario: the Inspector's own steps, a
    program's one run, an agent CLI's interactive UI (a scenario that attaches the
    resource), or its non-interactive mode; its files kept in ``folder``."""
    if spec.kind == INSPECTOR:
        return await run_inspector(spec, installed, root, plan, folder, clock)
    if spec.kind in (PROGRAM, LIBRARY):  # a library's program runs the flow itself
        return await run_program(spec, installed, root, plan, folder, clock)
    interactive = drivers.INTERACTIVE_DRIVERS.get(spec.interactive or "")
    if plan.scenario.play.attach and interactive is not None and plan.script == SCORED:
        return await run_interactive(spec, installed, root, plan, interactive, folder, clock)
    return await run_agent(spec, installed, root, plan, folder, clock)


async def run_clients(
    clients: list[ClientDef],
    versions: dict[str, str],
    scenarios: list[Scenario],
    *,
    runs: Path,
    tool: str = "auto",
    observe: float = DEFAULT_OBSERVE_SECONDS,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    jobs: int = DEFAULT_JOBS,
    progress: Progress = quiet,
    transport: str | None = None,
    finished: list[ClientRow] | None = None,
    reinstall: bool = False,
) -> list[ClientRow]:
    """Rows of ``clients`` in ``scenarios``, in their order; ``jobs`` rows at a time,
    of any client (each client installed first, all side by side); each run's files in
    ``runs`` (the invocation's folder); over ``transport``, or every one each client
    supports. ``finished`` gets each row as soon as it is made (in the order made)."""
    gate = asyncio.Semaphore(max(1, jobs))
    tally = Tally(sum(count_rows(c, scenarios, tool, transport) for c in clients), jobs)
    progress(f"{tally.total} row(s) to run, {jobs} at a time")

    async def one(spec: ClientDef) -> list[ClientRow]:
        name = spec.name
        return await run_client(
            spec,
            versions.get(name, spec.version),
            scenarios,
            runs=runs,
            tool=tool,
            observe=observe,
            timeout=timeout,
            progress=progress,
            transport=transport,
            tally=tally,
            gate=gate,
            finished=finished,
            reinstall=reinstall,
        )

    results = await asyncio.gather(*(one(spec) for spec in clients))
    return [row for rows in results for row in rows]
