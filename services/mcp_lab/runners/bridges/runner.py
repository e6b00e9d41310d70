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
import time
import warnings
from pathlib import Path

from mcp_lab.protocol import Transport
from mcp_lab.runners.bridges.install import install_bridge
from mcp_lab.runners.bridges.run import NOTIFY_TIMEOUT, BridgeOutcome, BridgePlan, run_once
from mcp_lab.runners.bridges.specs import BridgeSpec, Direction
from mcp_lab.runners.bridges.verdict import BridgeRow, bridge_row, not_supported, with_caveat
from mcp_lab.runners.install import InstallError
from mcp_lab.runners.phases import Clock, heartbeat
from mcp_lab.runners.program import run_folder
from mcp_lab.runners.progress import DEFAULT_JOBS, Progress, on_stderr, quiet
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import Scenario

DEFAULT_SCENARIOS = ("single", "repeated", "list-changed")
RESUMED_IN = "single"  # the scenario whose row has the resumption run
say_bridges = on_stderr("bridges")


def default_scenarios() -> list[Scenario]:
    return [registry.get(name) for name in DEFAULT_SCENARIOS]


async def run_bridge(
    spec: BridgeSpec,
    version: str,
    scenarios: list[Scenario],
    *,
    gate: asyncio.Semaphore,
    runs: Path,
    timeout: float = NOTIFY_TIMEOUT,
    program: list[str] | None = None,
    directions: list[Direction] | None = None,
    progress: Progress = quiet,
    finished: list[BridgeRow] | None = None,
) -> list[BridgeRow]:
    """One bridge's rows, a direction and scenario each; one row saying why when it
    cannot be installed; a direction this version cannot run at all is not run, its
    rows ``not supported``. ``runs``: the invocation's folder
    (:mod:`mcp_lab.runners.run_folders`), where each run keeps its files. ``program``: a
    bridge already on disk (a test's own). ``finished`` gets each row once it is made
    (what a Ctrl-C keeps)."""
    made_rows = finished if finished is not None else []

    def alone(row: BridgeRow) -> list[BridgeRow]:
        made_rows.append(row)
        return [row]

    if spec.not_installable:
        return alone(BridgeRow(spec.name, "-", "-", "-", notes=[spec.not_installable]))
    if program is None:
        started = time.monotonic()
        try:
            async with heartbeat(Clock(), progress, f"{spec.name} {version}: installing"):
                version, program = await install_bridge(spec, version)
        except InstallError as exc:
            progress(f"{spec.name} {version}: install failed")
            return alone(BridgeRow(spec.name, version, "-", "-").fail(f"install failed: {exc}"))
        progress(f"{spec.name} {version}: installed ({time.monotonic() - started:.0f} s)")
    ways = [d for d in spec.directions if directions is None or d in directions]

    async def one(plan: BridgePlan) -> tuple[BridgeOutcome, float]:
        async with gate:
            started = time.monotonic()
            what = f"{spec.name} {plan.direction.name} {plan.scenario.name}"
            with run_folder(spec.name, progress, what) as root:
                assert program is not None
                outcome = await run_once(spec, version, program, plan, root, runs, progress)
            return outcome, time.monotonic() - started

    async def made_row(way: Direction, scenario: Scenario) -> BridgeRow:
        why = spec.why_not(version, way)
        if why is not None:
            progress(f"{spec.name} {way.name} {scenario.name}: not supported: {why}")
            unsupported = not_supported(spec, version, way.name, scenario.name, why)
            made_rows.append(unsupported)
            return unsupported
        plan = BridgePlan(scenario, way, timeout=timeout)
        runs = [one(plan)]
        if scenario.name == RESUMED_IN and way.lab == Transport.STREAMABLE_HTTP:
            runs.append(one(BridgePlan(scenario, way, resume=True, timeout=timeout)))
        done = await asyncio.gather(*runs)
        outcomes = [outcome for outcome, _ in done]
        resumed = outcomes[1] if len(outcomes) > 1 else None
        made = with_caveat(spec, bridge_row(spec.name, version, outcomes[0], resumed))
        made.seconds = round(sum(seconds for _, seconds in done), 1)  # its runs' own time
        marks = " ".join(f"{k}={c.mark}" for k, c in made.steps.items() if c.mark != "-")
        progress(f"{spec.name} {way.name} {scenario.name}: {marks or made.notes[0]} "
                 f"({made.seconds:.0f} s)")  # fmt: skip
        made_rows.append(made)
        return made

    return list(await asyncio.gather(*(made_row(w, s) for w in ways for s in scenarios)))


async def run_bridges(
    bridges: list[BridgeSpec],
    versions: dict[str, str],
    scenarios: list[Scenario],
    *,
    runs: Path,
    timeout: float = NOTIFY_TIMEOUT,
    jobs: int = DEFAULT_JOBS,
    directions: list[Direction] | None = None,
    progress: Progress = quiet,
    finished: list[BridgeRow] | None = None,
) -> list[BridgeRow]:
    """Rows of ``bridges`` in ``scenarios``, in their order (``versions``: by name, the
    version to run where not the pinned one); ``jobs`` runs at
    a time, all bridges together; each run's files in ``runs`` (the invocation's
    folder)."""
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    gate = asyncio.Semaphore(max(1, jobs))
    results = await asyncio.gather(
        *(
            run_bridge(
                spec,
                versions.get(spec.name, spec.version),
                scenarios,
                gate=gate,
                runs=runs,
                timeout=timeout,
                directions=directions,
                progress=progress,
                finished=finished,
            )
            for spec in bridges
        )
    )
    return [row for rows in results for row in rows]
