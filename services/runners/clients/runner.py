"""``mcp-lab clients run``: real agent CLIs against fresh labs, offline.

For each client (installed once per version, :mod:`services.runners.clients.install`) and each
scenario that applies to it (:mod:`services.scenarios`), the runner makes the runs of
:mod:`services.runners.clients.runs`: a scored run per lab setup (``no tool``, and ``tool``
where the scenario asks for both), plus a pull run where the scenario has one.
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
from services.runners.clients.install import install
from services.runners.clients.matrix import Row
from services.runners.clients.model import PULL, SCORED
from services.runners.clients.pins import CLIENTS, ClientSpec
from services.runners.clients.runs import (
    DEFAULT_OBSERVE_SECONDS,
    DEFAULT_RUN_TIMEOUT,
    NO_TOOL,
    TOOL,
    Installed,
    Outcome,
    RunPlan,
    run_agent,
    run_inspector,
    run_interactive,
    runs_dir,
)
from services.runners.clients.verdict import to_row
from services.runners.install import InstallError, resolve_version
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


def applies(scenario: Scenario, spec: ClientSpec) -> bool:
    """Whether ``scenario`` is played with ``spec`` (an empty list: every client)."""
    return not scenario.play.clients or spec.name in scenario.play.clients


async def run_client(
    spec: ClientSpec,
    version: str,
    scenarios: list[Scenario],
    *,
    runs: Path,
    tool: str = "auto",
    observe: float = DEFAULT_OBSERVE_SECONDS,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    installed: Installed | None = None,
    progress: Progress = _quiet,
) -> list[Row]:
    """One client's rows, one per scenario and lab setup that apply; a single row saying
    why when the runner could not install it (or it cannot be installed offline).
    ``runs``: the invocation's folder (:mod:`services.runners.run_folders`), where each run keeps
    its files. ``installed``: a client that is already on disk (a test's own), with its
    driver."""
    if installed is None:
        if spec.not_installable or spec.package is None:
            why = spec.not_installable or "no package"
            return [Row(spec.name, version, "-", "-", level=None, server_level=None, notes=[why])]
        started = time.monotonic()
        try:
            version = await asyncio.to_thread(resolve_version, spec.package, version)
            binary, paths = await install(spec, version)
        except InstallError as exc:
            progress(f"{spec.name} {version}: install failed")
            return [Row(spec.name, version, "-", "-").fail(f"install failed: {exc}")]
        progress(f"{spec.name} {version}: installed ({time.monotonic() - started:.0f} s)")
        driver = drivers.AGENT_DRIVERS.get(spec.name) if spec.uses_model else None
        installed = Installed(binary, paths, driver, version)
    rows = []
    for scenario in (s for s in scenarios if applies(s, spec)):
        for setup in setups(scenario, tool):
            started = time.monotonic()
            scripts = (SCORED, PULL) if scenario.play.pull else (SCORED,)
            outcomes: dict[str, Outcome | str] = {}
            for script in scripts:
                plan = RunPlan(scenario, setup, script, observe, timeout)
                folder = runs_dir(runs, spec.name, installed.version, plan)
                with tempfile.TemporaryDirectory(prefix=f"mcp-lab-{spec.name}-") as root:
                    try:
                        outcomes[script] = await _run(spec, installed, Path(root), plan, folder)
                    except TimeoutError as exc:  # a lab that did not start (an OSError too)
                        outcomes[script] = f"the lab did not start: {exc}"
                    except OSError as exc:  # the CLI would not start
                        outcomes[script] = f"could not run {installed.binary.name}: {exc}"
            row = to_row(spec, installed.version, scenario, setup, outcomes)
            row.seconds = round(time.monotonic() - started, 1)
            level = "-" if row.level is None else str(row.level)
            progress(
                f"{spec.name} {installed.version} {scenario.name} ({setup}): level {level} "
                f"in {row.seconds:.0f} s"
            )
            rows.append(row)
    return rows


async def _run(
    spec: ClientSpec, installed: Installed, root: Path, plan: RunPlan, folder: Path
) -> Outcome:
    """One run, by the kind of client and scenario: the Inspector's own steps, an
    agent CLI's interactive UI (a scenario that attaches the resource), or its
    non-interactive mode; its files kept in ``folder``."""
    if installed.driver is None:
        return await run_inspector(spec, installed, root, plan, folder)
    interactive = drivers.INTERACTIVE_DRIVERS.get(spec.name)
    if plan.scenario.play.attach and interactive is not None and plan.script == SCORED:
        return await run_interactive(spec, installed, root, plan, interactive, folder)
    return await run_agent(spec, installed, root, plan, folder)


async def run_clients(
    names: list[str],
    versions: dict[str, str],
    scenarios: list[Scenario],
    *,
    runs: Path,
    tool: str = "auto",
    observe: float = DEFAULT_OBSERVE_SECONDS,
    timeout: float = DEFAULT_RUN_TIMEOUT,
    jobs: int = DEFAULT_JOBS,
    progress: Progress = _quiet,
) -> list[Row]:
    """Rows of ``names`` in ``scenarios``, in the order of ``names``; ``jobs`` clients
    at a time; each run's files in ``runs`` (the invocation's folder)."""
    gate = asyncio.Semaphore(max(1, jobs))

    async def one(name: str) -> list[Row]:
        spec = CLIENTS[name]
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
            )

    results = await asyncio.gather(*(one(name) for name in names))
    return [row for rows in results for row in rows]
