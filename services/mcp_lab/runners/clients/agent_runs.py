"""A client's runs with the scripted model, for agent CLIs: a scored or pull run, the
prompt given on the command line and, in a scored run, one continued turn of the same
session (:func:`run_agent`); or a scored run in the CLI's interactive UI under a
pseudo-terminal, the resource attached by typing its mention (:func:`run_interactive`).
What a run is and the kit every run shares are :mod:`mcp_lab.runners.clients.runs`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.configs import SERVER_NAME
from mcp_lab.runners.clients.definition import ClientDef
from mcp_lab.runners.clients.endpoint import serve
from mcp_lab.runners.clients.install import Installed
from mcp_lab.runners.clients.model import SCORED, ScriptedModel
from mcp_lab.runners.clients.runs import (
    HOLD_SECONDS,
    TOOL,
    ClientOutcome,
    ClientPlan,
    Updates,
    keep_logs,
    make_dirs,
    marking_phases,
    now_ms,
    run_cli,
    run_dirs,
    serves_http,
    shown,
)
from mcp_lab.runners.clients.terminal import KEY_BACKSPACE, KEY_CTRL_D, KEY_ENTER, Terminal, loosely
from mcp_lab.runners.lab import running_lab
from mcp_lab.runners.lab_side import LabSide, reach
from mcp_lab.runners.phases import Clock
from mcp_lab.runners.program import base_env

# The interactive UI (attached scenario): its prompt box is ready when its footer is
# drawn; a mention is offered with the resource's description; bounded waits.
_READY = r"for\s*shortc"
_OFFER_CHARS = 16
_OFFER_TRIES = 3  # after these, Enter resolves the mention all the same
_OFFER_SECONDS = 2.0
_BEFORE_ENTER_SECONDS = 0.5
_EXIT_SECONDS = 10.0


async def run_agent(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: ClientPlan,
    folder: Path,
    clock: Clock | None = None,
) -> ClientOutcome:
    """One run of an agent CLI (see the module docstring); its files kept in ``folder``."""
    assert installed.driver is not None
    home, workdir = make_dirs(root)
    outcome = ClientOutcome(plan, now_ms())
    hold = HOLD_SECONDS if plan.script == SCORED else None
    async with (
        running_lab(root, plan.setup == TOOL, hold, plan.scenario, serves_http(plan)) as lab,
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
            async with serve(model) as model_url, marking_phases(clock or Clock(), lab, side):
                dirs = run_dirs(home, workdir, side, model_url)
                await _agent_turns(spec, installed, dirs, model, outcome)
        finally:
            if follow is not None:
                follow.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await follow
        outcome.record = model.record
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = keep_logs(folder, lab, side, outcome, model.exchanges)
    return outcome


async def _agent_turns(
    spec: ClientDef,
    installed: Installed,
    dirs: drivers.RunDirs,
    model: ScriptedModel,
    outcome: ClientOutcome,
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
    outcome.started_ms = now_ms()
    cli, outcome.timed_out = await run_cli(
        spec.name, turn.argv, {**env, **turn.env}, dirs.workdir, plan.timeout
    )
    outcome.exit_code = cli.process.returncode
    outcome.output = [f"$ {shown(turn.argv)}", *cli.lines]
    if plan.script == SCORED and not outcome.timed_out and model.record.requests:
        again = installed.driver(str(installed.binary), dirs, drivers.CONTINUE_PROMPT, True)
        later, late = await run_cli(
            spec.name, again.argv, {**env, **again.env}, dirs.workdir, plan.timeout
        )
        outcome.continued_exit = -1 if late else later.process.returncode
        outcome.output += [f"$ {shown(again.argv)}", *later.lines]


async def run_interactive(
    spec: ClientDef,
    installed: Installed,
    root: Path,
    plan: ClientPlan,
    interactive: Callable[[str, drivers.RunDirs], drivers.Invocation],
    folder: Path,
    clock: Clock | None = None,
) -> ClientOutcome:
    """A scored run in the CLI's interactive UI, under a pseudo-terminal: the resource
    is attached by typing its mention (``@lab:URI``) into the prompt box, as a person
    would; then one more message in the same session, and the CLI is left (Ctrl-D).
    Its files are kept in ``folder``."""
    home, workdir = make_dirs(root)
    outcome = ClientOutcome(plan, now_ms())
    async with (
        running_lab(
            root, plan.setup == TOOL, HOLD_SECONDS, plan.scenario, serves_http(plan)
        ) as lab,
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
            async with serve(model) as model_url, marking_phases(clock or Clock(), lab, side):
                dirs = run_dirs(home, workdir, side, model_url)
                started = interactive(str(installed.binary), dirs)
                env = {**base_env(home, installed.paths), **started.env}
                outcome.started_ms = now_ms()
                term = await Terminal.start(started.argv, env, workdir)
                try:
                    await _converse(term, side, model, plan, outcome)
                finally:
                    outcome.exit_code = await term.stop()
                    outcome.output = [f"$ {shown(started.argv)}", *term.text.splitlines()]
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await follow
        outcome.record = model.record
        outcome.wire = side.wire()
        outcome.events, outcome.report = await lab.evidence()
        outcome.folder = keep_logs(folder, lab, side, outcome, model.exchanges)
    return outcome


async def _converse(
    term: Terminal, side: LabSide, model: ScriptedModel, plan: ClientPlan, outcome: ClientOutcome
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
