"""``mcp-lab clients run``: real agent CLIs against fresh labs, offline.

For each client (a client file, :mod:`services.runners.clients.definition`; installed once
per version, :mod:`services.runners.clients.install`), each transport it supports (or
the one asked for) and each scenario that applies to it (:mod:`services.scenarios`), the
runner makes the runs of :mod:`services.runners.clients.runs`: a scored run per lab setup
(``no tool``, and ``tool`` where the scenario asks for both), plus a pull run where the
scenario has one (agent CLIs and the Inspector).
:mod:`services.runners.clients.verdict` turns them into a matrix row. Clients run side by
side, ``jobs`` at a time (each run has a lab and loopback ports of its own); one
client's runs go one after the other.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.runners.clients import drivers
from services.runners.clients.definition import INSPECTOR, PROGRAM, ClientDef
from services.runners.clients.install import Installed, install
from services.runners.clients.matrix import Row
from services.runners.clients.model import PULL, SCORED
from services.runners.clients.runs import (
    DEFAULT_OBSERVE_SECONDS,
    DEFAULT_RUN_TIMEOUT,
    NO_TOOL,
    TOOL,
    Outcome,
    RunPlan,
    run_agent,
    run_inspector,
    run_interactive,
    run_program,
    runs_dir,
)
from services.runners.clients.verdict import to_row
from services.runners.install import InstallError
from services.scenarios.scenario import Scenario

# ``--tool``: which lab setups each scenario runs in. "auto": both where the scenario
# asks for both (single), else without the lab's tool.
TOOL_CHOICES = ("auto", "off", "on", "both")
DEFAULT_JOBS = 3
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def say_on_stderr(line: str) -> None:
    print(f"mcp-lab clients: {line}", file=sys.stderr, flush=True)


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
    progress: Progress = _quiet,
    transport: str | None = None,
) -> list[Row]:
    """One client's rows, one per transport, scenario and lab setup that apply; a
    single row saying why when the runner could not install it (or it cannot be
    installed offline, or does not speak ``transport``). ``runs``: the invocation's
    folder (:mod:`services.runners.run_folders`), where each run keeps its files.
    ``installed``: a client that is already on disk (a test's own), with its driver."""
    if transport is not None and transport not in spec.transports:
        why = f"does not support {transport} (its file says {', '.join(spec.transports)})"
        return [Row(spec.name, version, "-", "-", level=None, server_level=None, notes=[why])]
    if installed is None:
        if spec.not_installable or spec.package is None:
            why = spec.not_installable or "no package"
            return [Row(spec.name, version, "-", "-", level=None, server_level=None, notes=[why])]
        started = time.monotonic()
        try:
            installed = await install(spec, version)
        except InstallError as exc:
            progress(f"{spec.name} {version}: install failed")
            return [Row(spec.name, version, "-", "-").fail(f"install failed: {exc}")]
        progress(f"{spec.name} {installed.version}: installed ({time.monotonic() - started:.0f} s)")
    rows = []
    for way in transports_of(spec, transport):
        for scenario in (s for s in scenarios if applies(s, spec)):
            for setup in setups(scenario, tool):
                row = await _row(spec, installed, scenario, setup, way, runs, observe, timeout)
                level = "-" if row.level is None else str(row.level)
                progress(
                    f"{spec.name} {installed.version} {scenario.name} ({setup}, {way}): "
                    f"level {level} in {row.seconds:.0f} s"
                )
                rows.append(row)
    return rows


async def _row(
    spec: ClientDef,
    installed: Installed,
    scenario: Scenario,
    setup: str,
    transport: str,
    runs: Path,
    observe: float,
    timeout: float,
) -> Row:
    """The runs of one row (scored, and pull where the scenario has one), and its row."""
    started = time.monotonic()
    pull = scenario.play.pull and spec.kind != PROGRAM
    scripts = (SCORED, PULL) if pull else (SCORED,)
    outcomes: dict[str, Outcome | str] = {}
    for script in scripts:
        plan = RunPlan(scenario, setup, script, observe, timeout, transport)
        folder = runs_dir(runs, spec.name, installed.version, plan)
        with tempfile.TemporaryDirectory(prefix=f"mcp-lab-{spec.name}-") as root:
            try:
                outcomes[script] = await _run(spec, installed, Path(root), plan, folder)
            except TimeoutError as exc:  # a lab that did not start (an OSError too)
                outcomes[script] = f"the lab did not start: {exc}"
            except OSError as exc:  # the client would not start
                outcomes[script] = f"could not run {installed.binary.name}: {exc}"
    row = to_row(spec, installed.version, scenario, setup, outcomes)
    row.transport = transport
    row.seconds = round(time.monotonic() - started, 1)
    return row


async def _run(
    spec: ClientDef, installed: Installed, root: Path, plan: RunPlan, folder: Path
) -> Outcome:
    """One run, by the kind of client and scenario: the Inspector's own steps, a
    program's one run, an agent CLI's interactive UI (a scenario that attaches the
    resource), or its non-interactive mode; its files kept in ``folder``."""
    if spec.kind == INSPECTOR:
        return await run_inspector(spec, installed, root, plan, folder)
    if spec.kind == PROGRAM:
        return await run_program(spec, installed, root, plan, folder)
    interactive = drivers.INTERACTIVE_DRIVERS.get(spec.interactive or "")
    if plan.scenario.play.attach and interactive is not None and plan.script == SCORED:
        return await run_interactive(spec, installed, root, plan, interactive, folder)
    return await run_agent(spec, installed, root, plan, folder)


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
    progress: Progress = _quiet,
    transport: str | None = None,
) -> list[Row]:
    """Rows of ``clients`` in ``scenarios``, in their order; ``jobs`` clients at a time;
    each run's files in ``runs`` (the invocation's folder); over ``transport``, or every
    one each client supports."""
    gate = asyncio.Semaphore(max(1, jobs))

    async def one(spec: ClientDef) -> list[Row]:
        name = spec.name
        async with gate:
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
            )

    results = await asyncio.gather(*(one(spec) for spec in clients))
    return [row for rows in results for row in rows]
