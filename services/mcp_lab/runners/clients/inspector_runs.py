"""A run of the MCP Inspector's CLI (``mcpdo``), which has no model: scored, it
connects, reads, subscribes and waits (the lab plays the timeline after the subscribe
by itself), then watches whether the client reads again by itself; pull, it connects,
reads, the runner updates, and it reads again (:func:`run_inspector`). What a run is
and the kit every run shares are :mod:`mcp_lab.runners.clients.runs`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from mcp_lab import protocol
from mcp_lab.catalog import versions_in
from mcp_lab.runners.clients.configs import SERVER_NAME
from mcp_lab.runners.clients.definition import STDIO, ClientDef
from mcp_lab.runners.clients.install import Installed
from mcp_lab.runners.clients.model import SCORED
from mcp_lab.runners.clients.runs import (
    TOOL,
    ClientOutcome,
    ClientPlan,
    keep_logs,
    make_dirs,
    marking_phases,
    now_ms,
    run_cli,
    serves_http,
)
from mcp_lab.runners.lab import running_lab
from mcp_lab.runners.lab_side import LabSide, reach
from mcp_lab.runners.phases import Clock
from mcp_lab.runners.program import Process, base_env
from mcp_lab.scenarios.scenario import UPDATE

_DAEMON_STOP_TIMEOUT = 30.0


async def run_inspector(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: ClientPlan,
    folder: Path,
    clock: Clock | None = None,
) -> ClientOutcome:
    """``mcpdo`` needs no model. Scored: connect, read, subscribe (it prints each update
    as it arrives), wait for the lab's own first update of the subscriber, then watch
    for the timeline's span plus ``observe`` seconds whether it reads again by itself.
    Pull: connect, read, the runner's update, read again (the runner's command: never
    a level). Over stdio it starts the lab's stdio server itself (``connect --transport
    stdio -- CMD``). Its files are kept in ``folder``."""
    home, workdir = make_dirs(root)
    env = {**base_env(home, installed.paths), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    outcome = ClientOutcome(plan, now_ms())
    async with (
        running_lab(root, plan.setup == TOOL, None, plan.scenario, serves_http(plan)) as lab,
        reach(lab, plan.transport, root / "lab-side") as side,
    ):
        mcpdo = [str(installed.binary), "--plain"]
        conn = ["--connection", SERVER_NAME]

        async def step(label: str, args: list[str]) -> bool:
            done, timed_out = await run_cli(label, [*mcpdo, *args], env, workdir, plan.timeout)
            outcome.output.extend([f"$ mcpdo {' '.join(args)}", *done.lines])
            outcome.printed_versions += versions_in("\n".join(done.lines))
            outcome.exit_code = done.process.returncode
            outcome.timed_out = outcome.timed_out or timed_out
            return not (outcome.exit_code or timed_out)

        outcome.started_ms = now_ms()
        if side.transport == STDIO:
            target = ["--transport", "stdio", *conn, "--", *side.command]
        else:
            target = [side.url, "--transport", "http", *conn]
        async with marking_phases(clock or Clock(), lab, side):
            try:
                ok = await step("connect", ["connect", *target])
                ok = ok and await step("read", [*conn, protocol.READ, plan.uri])
                if ok and plan.script == SCORED:
                    await _inspector_subscribe(side, mcpdo, conn, env, workdir, plan, outcome)
                elif ok:
                    await lab.apply_timeline()
                    await step("read", [*conn, protocol.READ, plan.uri])
            finally:
                stop, _ = await run_cli(
                    "daemon", [*mcpdo, "daemon", "stop"], env, workdir, _DAEMON_STOP_TIMEOUT
                )
                outcome.output += ["$ mcpdo daemon stop", *stop.lines]
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = keep_logs(folder, lab, side, outcome, [])
    return outcome


async def _inspector_subscribe(
    side: LabSide,
    mcpdo: list[str],
    conn: list[str],
    env: dict[str, str],
    workdir: Path,
    plan: ClientPlan,
    outcome: ClientOutcome,
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
