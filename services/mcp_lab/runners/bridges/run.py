"""One run of one bridge: a fresh lab, the bridge between the reference client and the
lab in one direction, a wire tap on each side, the scenario's ideal flow.

- The **lab side**: the bridge reaches the lab through a :class:`WireTap` (Streamable
  HTTP, SSE), or runs the lab's stdio server behind the stdio tap
  (:mod:`mcp_lab.runners.stdio_tap`, with the lab's Redis and settings).
- The **client side**: the reference client (:class:`mcp_lab.runners.probe.Probe`, the
  SDK client of ``mcp-lab probe``, playing the scenario) reaches the bridge through a
  second :class:`WireTap`, or starts it as its stdio server behind the stdio tap.
- The **resumption run** (``resume``): once the bridge's subscribe has reached the lab,
  the lab-side tap ends the bridge's GET streams and holds its new ones until the lab
  has sent the update (to no open stream): only a bridge that reconnects with
  ``Last-Event-ID`` gets it replayed and brings it to the client. It waits for the
  subscribe as long as the client's whole flow may take (:func:`flow_bound`): a bridge
  slow to start and connect is waited for, not taken for one that never subscribed.
- Each **wait** of a run (the lab's start, the bridge listening, the client's flow)
  that lasts another 15 s is said (:mod:`mcp_lab.runners.bridges.waits`).

Every file of the run stays in its folder in the invocation's folder
(:func:`mcp_lab.runners.run_folders.run_dir`): the bridge's output, both wires, the
probe's steps, the lab's logs and evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mcp.client.stdio import StdioServerParameters

from mcp_lab import contract
from mcp_lab.evidence.build import Report
from mcp_lab.process.embedded_redis import free_port
from mcp_lab.protocol import Transport
from mcp_lab.runners.bridges.definition import PATHS
from mcp_lab.runners.bridges.output import bridge_said
from mcp_lab.runners.bridges.specs import (
    BridgeSpec,
    Direction,
    Ends,
    Launch,
)
from mcp_lab.runners.bridges.waits import Say, Waits
from mcp_lab.runners.lab import RunLab, running_lab
from mcp_lab.runners.lab_side import TAP, stdio_server
from mcp_lab.runners.probe import Probe
from mcp_lab.runners.program import Process, base_env
from mcp_lab.runners.progress import quiet
from mcp_lab.runners.run_folders import run_dir
from mcp_lab.runners.wire import WireMessage, WireTap, from_jsonl, to_jsonl
from mcp_lab.scenarios.scenario import Scenario

# How long the probe waits for each notification (and a list_changed).
NOTIFY_TIMEOUT = 8.0
_LISTEN_SECONDS = 30.0  # a bridge serving HTTP or SSE listens on its port within this
_POLL_SECONDS = 0.05
_SLACK_SECONDS = 30.0  # the whole flow may take this long beyond its notifications
_FLOW_BOUNDS = 4  # a flow that keeps making steps ends within this many of its bounds
# A loop of the lab's own (relay, updater) that failed and restarted: what it was
# doing is lost (a list_changed the relay was sending is not sent again).
_LAB_FAULT = re.compile(r"\[(relay|updater)\] unexpected error")
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\]\s*)?(?P<raised>[\w.]*(?:Error|Exception): .*)$")
_TRACEBACK_LINES = 60  # where its exception is looked for after the fault's line


@dataclass(frozen=True)
class BridgePlan:
    """One run: the scenario, the direction, and whether it is the resumption run."""

    scenario: Scenario
    direction: Direction
    resume: bool = False
    timeout: float = NOTIFY_TIMEOUT

    @property
    def label(self) -> str:
        return f"{self.scenario.name}-resume" if self.resume else self.scenario.name

    @property
    def folder_parts(self) -> tuple[str, ...]:
        """Where in its bridge version's folder the run keeps its files
        (:func:`mcp_lab.runners.run_folders.run_dir`): direction, scenario (-resume)."""
        return (self.direction.name.replace("->", "-to-"), self.label)


@dataclass(frozen=True)
class ProbeStep:
    """One step line of the reference client, with the time it was emitted."""

    step: str
    at_ms: int
    fields: dict[str, Any]


@dataclass
class Cut:
    """What the resumption run did: when it cut the lab-side GET streams (how many were
    open), when the lab then sent the update, when it let new GETs through again; and
    how long it waited for the bridge's subscribe to reach the lab."""

    at_ms: int | None = None
    streams: int = 0
    sent_ms: int | None = None
    released_ms: int | None = None
    waited_s: float | None = None  # for the subscribe (all of it when none came)


@dataclass
class BridgeOutcome:
    """What one run produced, before it becomes (part of) a row."""

    plan: BridgePlan
    started_ms: int
    steps: list[ProbeStep] = field(default_factory=list)
    exit_code: int | None = None
    events: list[contract.Event] = field(default_factory=list)
    report: Report | None = None
    client_wire: list[WireMessage] = field(default_factory=list)
    lab_wire: list[WireMessage] = field(default_factory=list)
    bridge_output: list[str] = field(default_factory=list)
    cut: Cut | None = None
    # The lab's own faults during the run (a relay or updater loop that failed and
    # restarted), each with its exception: marks after one may be the lab's doing.
    lab_faults: list[str] = field(default_factory=list)
    failure: str | None = None  # the runner could not make the run (a bridge that never listened)
    folder: Path | None = None

    def step(self, name: str) -> list[ProbeStep]:
        return [s for s in self.steps if s.step == name]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _fresh(folder: Path) -> Path:
    if folder.exists():
        for old in sorted(folder.rglob("*"), reverse=True):
            old.rmdir() if old.is_dir() else old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def _listening(bridge: Process, port: int) -> None:
    """Wait (bounded) until the bridge accepts connections on ``port``; TimeoutError
    when it does not, or when it exits first, quoting the line of its output that says
    what went wrong (:func:`bridge_said`: not the usage text it printed with it)."""
    deadline = time.monotonic() + _LISTEN_SECONDS
    while time.monotonic() < deadline:
        if bridge.process.returncode is not None:
            break
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(_POLL_SECONDS)  # nothing to await: the port is polled
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    code = bridge.process.returncode
    said = bridge_said(bridge.lines) or "it printed nothing"
    if code is not None:
        raise TimeoutError(f"the bridge exited (exit code {code}) before it listened: {said}")
    raise TimeoutError(
        f"the bridge did not listen on port {port} within {_LISTEN_SECONDS:.0f} s: {said}"
    )


async def _resume_cut(
    lab: RunLab, tap: WireTap, cut: Cut, hold: asyncio.Event, connect: float, send: float
) -> None:
    """Cut the lab-side GET streams once the subscribe reached the lab (a bridge slow to
    start and connect gets ``connect`` seconds: the whole flow's bound); let new GETs
    through once the lab has sent the update (or after ``send`` seconds)."""
    started = time.monotonic()
    try:
        try:
            index = await lab.http_server.wait_for_index(r"\[resources/subscribe\] uri=",
                                                         connect)  # fmt: skip
        finally:
            cut.waited_s = round(time.monotonic() - started, 1)
        cut.at_ms, cut.streams = _now_ms(), tap.cut_streams(hold)
        await lab.http_server.wait_for(r"\[notification/send\] notifications/resources/updated",
                                  send, index)  # fmt: skip
        cut.sent_ms = _now_ms()
    except TimeoutError:
        pass
    finally:
        hold.set()
        cut.released_ms = _now_ms()


def _read_wire(path: Path) -> list[WireMessage]:
    if not path.exists():
        return []
    return from_jsonl(path.read_text())


async def run_once(spec: BridgeSpec, version: str, program: list[str], plan: BridgePlan,
                   root: Path, runs: Path, say: Say = quiet) -> BridgeOutcome:  # fmt: skip
    """One run (see the module docstring); ``root``: a temporary folder for the lab;
    ``runs``: the invocation's folder, where the run keeps its files; ``say``: a line
    each time one of its waits has lasted another 15 s."""
    folder = _fresh(run_dir(runs, spec.name, version, plan.folder_parts))
    outcome = BridgeOutcome(plan, _now_ms(), folder=folder)
    (root / "home").mkdir()
    (root / "work").mkdir()
    assert spec.launch is not None
    waits = Waits(say, f"{spec.name} {version} {plan.direction.name} {plan.label}")
    async with waits.beating():
        await _lab_run(spec, version, program, plan, outcome, root, waits)
    return outcome


async def _lab_run(spec: BridgeSpec, version: str, program: list[str], plan: BridgePlan,
                   outcome: BridgeOutcome, root: Path, waits: Waits) -> None:  # fmt: skip
    home, work = root / "home", root / "work"
    try:
        async with running_lab(root, scenario=plan.scenario) as lab:
            try:
                await _bridged(spec, version, program, plan, lab, outcome, home, work, waits)
            except TimeoutError as exc:
                outcome.failure = str(exc)
            waits.now("reading the lab's evidence")
            outcome.events, outcome.report = await lab.evidence()
            _keep(lab, outcome)
            outcome.lab_faults = lab_faults(
                [*lab.http_server.lines, *lab.updater.lines, *outcome.bridge_output]
            )
    except TimeoutError as exc:  # the lab did not start
        outcome.failure = f"the lab did not start: {exc}"
    except Exception as exc:  # the runner's own fault: this row says so, the others stand
        outcome.failure = f"{type(exc).__name__}: {exc}"


async def _bridged(spec: BridgeSpec, version: str, program: list[str], plan: BridgePlan,
                   lab: RunLab, outcome: BridgeOutcome, home: Path, work: Path,
                   waits: Waits) -> None:  # fmt: skip
    assert spec.launch is not None and outcome.folder is not None
    folder, d = outcome.folder, plan.direction
    env = base_env(home, [])
    async with AsyncExitStack() as stack:
        lab_tap: WireTap | None = None
        lab_url: str | None = None
        lab_command: list[str] | None = None
        if d.lab == Transport.STDIO:
            lab_command = stdio_server(lab, folder, log=False)
        else:
            lab_tap = WireTap(lab.base_url)
            lab_url = await stack.enter_async_context(lab_tap.serve()) + PATHS[d.lab]
        port = free_port() if d.client != Transport.STDIO else None
        ends = Ends(program, d, lab_url, lab_command, port, folder, home, version)
        invocation = spec.launch(ends)
        (folder / "bridge.argv").write_text(json.dumps(invocation.argv) + "\n")
        client_tap: WireTap | None = None
        probe_kwargs: dict[str, Any] = {}
        errlog: TextIO | None = None
        if d.client == Transport.STDIO:
            errlog = stack.enter_context((folder / "bridge.log").open("w"))
            wire = ["--out", str(folder / "wire-client.jsonl")]
            params = StdioServerParameters(
                command=TAP[0], args=[*TAP[1:], *wire, "--", *invocation.argv], env=env,
                cwd=str(work),
            )  # fmt: skip
            probe_kwargs = {"transport": d.client.short, "stdio": params, "errlog": errlog}
            url = ""
        else:
            assert port is not None
            bridge = await Process.start(spec.name, invocation.argv, env, work)
            stack.push_async_callback(_stopped, bridge, outcome)
            waits.now(f"waiting for the bridge to listen on port {port} "
                      f"(up to {_LISTEN_SECONDS:.0f} s)")  # fmt: skip
            await _listening(bridge, port)
            if invocation.ready is not None:
                waits.now(f"waiting for the bridge to say {invocation.ready!r} "
                          f"(up to {_LISTEN_SECONDS:.0f} s)")  # fmt: skip
                await bridge.wait_for(invocation.ready, _LISTEN_SECONDS)
            client_tap = WireTap(f"http://127.0.0.1:{port}")
            url = await stack.enter_async_context(client_tap.serve()) + _path(invocation)
            probe_kwargs = {"transport": d.client.short}
        bound = flow_bound(plan)
        cutter: asyncio.Task[None] | None = None
        if plan.resume and lab_tap is not None:
            outcome.cut = Cut()
            hold = asyncio.Event()
            cutter = asyncio.create_task(
                _resume_cut(lab, lab_tap, outcome.cut, hold, bound, plan.timeout)
            )

        loop = asyncio.get_running_loop()
        ceiling = loop.time() + bound * _FLOW_BOUNDS
        watch = asyncio.timeout(bound)

        def on_step(step: str, **fields: Any) -> None:
            outcome.steps.append(ProbeStep(step, _now_ms(), fields))
            if not watch.expired():  # each step gives the flow another bound, to a ceiling
                watch.reschedule(min(loop.time() + bound, ceiling))

        probe = Probe(
            url, plan.scenario.read_uri, plan.timeout, "legacy", None,
            scenario=plan.scenario, on_step=on_step, say=lambda _: None, insist=True,
            prefix=invocation.prefix, keep_going=True, **probe_kwargs,
        )  # fmt: skip
        outcome.started_ms = _now_ms()
        waits.now(f"waiting for the reference client's flow through the bridge "
                  f"(up to {bound:.0f} s for each step)")  # fmt: skip
        try:
            async with watch:
                outcome.exit_code = await probe.run()
        except TimeoutError:
            outcome.failure = _flow_timeout(bound, loop.time() >= ceiling, outcome.steps)
        finally:
            if cutter is not None:
                cutter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await cutter
    outcome.lab_wire = lab_tap.messages if lab_tap else _read_wire(folder / "wire-lab.jsonl")
    outcome.client_wire = (
        client_tap.messages if client_tap else _read_wire(folder / "wire-client.jsonl")
    )
    if errlog is not None:
        outcome.bridge_output = (folder / "bridge.log").read_text().splitlines()


def flow_bound(plan: BridgePlan) -> float:
    """How long the reference client's whole flow takes on an idle machine at most, its
    connection to a slow bridge included: each notification's wait, and
    :data:`_SLACK_SECONDS` beyond. The flow fails once it goes that long without a step
    (a bridge that starts a process for every request, on a loaded machine, is slow but
    goes on), or once it has taken :data:`_FLOW_BOUNDS` of them in all."""
    return plan.timeout * (len(plan.scenario.timeline) + 1) + _SLACK_SECONDS


def _flow_timeout(bound: float, at_ceiling: bool, steps: list[ProbeStep]) -> str:
    """The failure of a flow that ran out of time, and where it was."""
    last = f"its last step {steps[-1].step!r}" if steps else "no step"
    if at_ceiling:
        return f"the reference client's flow took over {bound * _FLOW_BOUNDS:.0f} s ({last})"
    return f"the reference client's flow made no step for {bound:.0f} s ({last})"


def lab_faults(lines: list[str]) -> list[str]:
    """Each fault of the lab's own loops in ``lines`` (the lab's logs, and the bridge's
    output where the bridge runs the lab's stdio server), with the exception after it."""
    faults = []
    for at, line in enumerate(lines):
        found = _LAB_FAULT.search(line)
        if found is None:
            continue
        traceback = lines[at + 1 : at + 1 + _TRACEBACK_LINES]
        raised = (_EXCEPTION.search(t.strip()) for t in traceback)
        exception = next((m.group("raised") for m in raised if m), None)
        faults.append(f"{found.group(0)} ({exception[:300]})" if exception else found.group(0))
    return faults


def _path(invocation: Launch) -> str:
    assert invocation.client_path is not None
    return invocation.client_path


async def _stopped(bridge: Process, outcome: BridgeOutcome) -> None:
    await bridge.stop()
    outcome.bridge_output = bridge.lines


def _keep(lab: RunLab, outcome: BridgeOutcome) -> None:
    """The run's files, beside what the taps wrote as they went."""
    folder = outcome.folder
    assert folder is not None
    (folder / "server.log").write_text("\n".join(lab.http_server.lines) + "\n")
    (folder / "updater.log").write_text("\n".join(lab.updater.lines) + "\n")
    lines = [json.dumps(asdict(e)) for e in outcome.events]
    (folder / "events.jsonl").write_text("".join(f"{line}\n" for line in lines))
    steps = [json.dumps({"step": s.step, "at_ms": s.at_ms, **s.fields}, default=str)
             for s in outcome.steps]  # fmt: skip
    (folder / "probe.jsonl").write_text("".join(f"{line}\n" for line in steps))
    if outcome.plan.direction.client != Transport.STDIO:
        (folder / "bridge.log").write_text("\n".join(outcome.bridge_output) + "\n")
        (folder / "wire-client.jsonl").write_text(to_jsonl(outcome.client_wire))
    if outcome.plan.direction.lab != Transport.STDIO:
        (folder / "wire-lab.jsonl").write_text(to_jsonl(outcome.lab_wire))
    if outcome.cut is not None:
        (folder / "cut.json").write_text(json.dumps(asdict(outcome.cut)) + "\n")
