"""``mcp-lab bridges run``: each bridge between the reference client and a fresh lab,
in every direction it supports, in each scenario.

A bridge is installed once per version (:mod:`mcp_lab.runners.bridges.install`); each of its
runs (:func:`mcp_lab.runners.bridges.run.run_once`: a direction and a scenario, plus in
``single`` the resumption run where the bridge reaches the lab over Streamable HTTP)
has a lab, taps and ports of its own, so runs go side by side, ``jobs`` at a time, all
bridges together. :mod:`mcp_lab.runners.bridges.verdict` makes each row.
"""

from __future__ import annotations

import asyncio
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from mcp_lab.runners.bridges.install import install
from mcp_lab.runners.bridges.run import DEFAULT_TIMEOUT, Outcome, RunPlan, run_once
from mcp_lab.runners.bridges.specs import BRIDGES, HTTP, BridgeSpec, Direction
from mcp_lab.runners.bridges.verdict import Row, not_supported, to_row, with_caveat
from mcp_lab.runners.install import InstallError
from mcp_lab.runners.phases import Clock, heartbeat
from mcp_lab.runners.program import run_folder
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import Scenario

DEFAULT_JOBS = 3
DEFAULT_SCENARIOS = ("single", "repeated", "list-changed")
RESUMED_IN = "single"  # the scenario whose row has the resumption run
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def say_on_stderr(line: str) -> None:
    print(f"mcp-lab bridges: {line}", file=sys.stderr, flush=True)


def default_scenarios() -> list[Scenario]:
    return [registry.get(name) for name in DEFAULT_SCENARIOS]


async def run_bridge(
    spec: BridgeSpec,
    version: str,
    scenarios: list[Scenario],
    *,
    gate: asyncio.Semaphore,
    runs: Path,
    timeout: float = DEFAULT_TIMEOUT,
    program: list[str] | None = None,
    directions: list[Direction] | None = None,
    progress: Progress = _quiet,
    finished: list[Row] | None = None,
) -> list[Row]:
    """One bridge's rows, a direction and scenario each; one row saying why when it
    cannot be installed; a direction this version cannot run at all is not run, its
    rows ``not supported``. ``runs``: the invocation's folder
    (:mod:`mcp_lab.runners.run_folders`), where each run keeps its files. ``program``: a
    bridge already on disk (a test's own). ``finished`` gets each row once it is made
    (what a Ctrl-C keeps)."""
    made_rows = finished if finished is not None else []

    def alone(row: Row) -> list[Row]:
        made_rows.append(row)
        return [row]

    if spec.not_installable:
        return alone(Row(spec.name, "-", "-", "-", notes=[spec.not_installable]))
    if program is None:
        started = time.monotonic()
        try:
            async with heartbeat(Clock(), progress, f"{spec.name} {version}: installing"):
                version, program = await install(spec, version)
        except InstallError as exc:
            progress(f"{spec.name} {version}: install failed")
            return alone(Row(spec.name, version, "-", "-").fail(f"install failed: {exc}"))
        progress(f"{spec.name} {version}: installed ({time.monotonic() - started:.0f} s)")
    ways = [d for d in spec.directions if directions is None or d in directions]

    async def one(plan: RunPlan) -> tuple[Outcome, float]:
        async with gate:
            started = time.monotonic()
            what = f"{spec.name} {plan.direction.name} {plan.scenario.name}"
            with run_folder(spec.name, progress, what) as root:
                assert program is not None
                outcome = await run_once(spec, version, program, plan, root, runs, progress)
            return outcome, time.monotonic() - started

    async def made_row(way: Direction, scenario: Scenario) -> Row:
        why = spec.why_not(version, way)
        if why is not None:
            progress(f"{spec.name} {way.name} {scenario.name}: not supported: {why}")
            unsupported = not_supported(spec, version, way.name, scenario.name, why)
            made_rows.append(unsupported)
            return unsupported
        plan = RunPlan(scenario, way, timeout=timeout)
        runs = [one(plan)]
        if scenario.name == RESUMED_IN and way.lab == HTTP:
            runs.append(one(RunPlan(scenario, way, resume=True, timeout=timeout)))
        done = await asyncio.gather(*runs)
        outcomes = [outcome for outcome, _ in done]
        resumed = outcomes[1] if len(outcomes) > 1 else None
        made = with_caveat(spec, to_row(spec.name, version, outcomes[0], resumed))
        made.seconds = round(sum(seconds for _, seconds in done), 1)  # its runs' own time
        marks = " ".join(f"{k}={c.mark}" for k, c in made.steps.items() if c.mark != "-")
        progress(f"{spec.name} {way.name} {scenario.name}: {marks or made.notes[0]} "
                 f"({made.seconds:.0f} s)")  # fmt: skip
        made_rows.append(made)
        return made

    return list(await asyncio.gather(*(made_row(w, s) for w in ways for s in scenarios)))


async def run_bridges(
    names: list[str],
    versions: dict[str, str],
    scenarios: list[Scenario],
    *,
    runs: Path,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = DEFAULT_JOBS,
    directions: list[Direction] | None = None,
    progress: Progress = _quiet,
    finished: list[Row] | None = None,
) -> list[Row]:
    """Rows of ``names`` in ``scenarios``, in the order of ``names``; ``jobs`` runs at
    a time, all bridges together; each run's files in ``runs`` (the invocation's
    folder)."""
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    gate = asyncio.Semaphore(max(1, jobs))
    results = await asyncio.gather(
        *(
            run_bridge(
                BRIDGES[name],
                versions.get(name, BRIDGES[name].version),
                scenarios,
                gate=gate,
                runs=runs,
                timeout=timeout,
                directions=directions,
                progress=progress,
                finished=finished,
            )
            for name in names
        )
    )
    return [row for rows in results for row in rows]
