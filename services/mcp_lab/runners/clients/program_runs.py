"""The one run of a program with no model (a client file of kind ``program``, or
``mcp-lab check --command``): started once, told where the lab is, it does the whole
flow by itself while the lab plays the scenario's timeline after its subscribe
(:func:`run_program`). What a run is and the kit every run shares are
:mod:`mcp_lab.runners.clients.runs`.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp_lab.runners.clients.definition import COMMAND, ClientDef
from mcp_lab.runners.clients.install import Installed
from mcp_lab.runners.clients.runs import (
    TOOL,
    ClientOutcome,
    ClientPlan,
    keep_logs,
    make_dirs,
    marking_phases,
    now_ms,
    run_cli,
    run_dirs,
    serves_http,
    shown,
)
from mcp_lab.runners.lab import running_lab
from mcp_lab.runners.lab_side import reach
from mcp_lab.runners.phases import Clock
from mcp_lab.runners.program import base_env

# What --own-home gives back of the caller's environment (else the run's own folders).
_HOME_KEYS = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


async def run_program(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: ClientPlan,
    folder: Path,
    clock: Clock | None = None,
) -> ClientOutcome:
    """One run of a program with no model: started once, told where the lab is
    (``{url}`` or ``{server_command}``, and ``MCP_LAB_URL`` / ``MCP_LAB_SERVER_COMMAND``),
    it does the whole flow by itself until it exits (killed after the plan's timeout);
    the lab plays the scenario's timeline after its subscribe. It runs in the folder of
    its client file (a command: where ``mcp-lab check`` runs), so its relative paths
    hold; a command also gets the caller's environment (HOME and the XDG folders are the
    run's own, or with ``own_home`` the caller's). Its files kept in ``folder``."""
    assert installed.driver is not None
    home, workdir = make_dirs(root)
    outcome = ClientOutcome(plan, now_ms())
    async with (
        running_lab(root, plan.setup == TOOL, None, plan.scenario, serves_http(plan)) as lab,
        reach(lab, plan.transport, root / "lab-side") as side,
    ):
        dirs = run_dirs(home, workdir, side)
        turn = installed.driver(str(installed.binary), dirs, "", False)
        # A command on the machine is the user's own: it gets the caller's environment
        # (its config, its tokens), under the run's own HOME like every client.
        caller = dict(os.environ) if spec.source == COMMAND else {}
        env = {**caller, **base_env(home, installed.paths), **turn.env}
        if spec.own_home and spec.source == COMMAND:  # check --own-home: the caller's own
            for key in _HOME_KEYS:
                env.pop(key, None)
                if key in os.environ:
                    env[key] = os.environ[key]
        outcome.started_ms = now_ms()
        async with marking_phases(clock or Clock(), lab, side):  # in its own folder: its paths hold
            done, outcome.timed_out = await run_cli(
                spec.name, turn.argv, env, Path(spec.here), plan.timeout
            )
        outcome.exit_code = done.process.returncode
        outcome.output = [f"$ {shown(turn.argv)}", *done.lines]
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = keep_logs(folder, lab, side, outcome, [])
    return outcome
