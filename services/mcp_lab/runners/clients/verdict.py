"""One matrix row from a client's two runs: the verdict is the client's own.

- Levels 1-6 come from the lab's evidence of the **scored** run alone, for the
  client's ``clientInfo`` (:func:`mcp_lab.evidence.scoring.score_clients`: levels from
  subscribe up build on the level below). In that run nobody asks for the resource
  twice, so every read after the update is the client's own.
- Level 7 only when the client put the update into its model's context unasked:
  version 2 (``push``) or a text saying the resource changed (``notice``), found by the
  scripted model in a request after the update. A read the model asked for, or a tool
  call, never raises a level.
- ``pull`` (the separate run in which the model asks to read again) is a column and a
  note, never a level.
- The wire capture of the scored run fills the same checkpoints independently; where
  it disagrees with the lab's evidence, the row says so.
- When the runner itself failed (install, a CLI that never reached the model, a model
  request the script could not answer, a failed update), the row says "runner failed"
  and has no level, and its checklist answers only what the client was seen doing: no
  box says ``no`` of a client the run says nothing about (JSON: the box is absent).
- A client that never exits is "did not exit; stopped at --timeout N s"; the lines its
  stdio tap could not pass as messages are said too (:func:`mcp_lab.runners.stdio_tap.
  row_notes`); a note quoting the client's output keeps its error line whole (:func:`said`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mcp_lab import protocol, untrusted
from mcp_lab.catalog import versions_in
from mcp_lab.evidence import levels
from mcp_lab.runners import wire
from mcp_lab.runners.clients.definition import ANY_CLIENT, ClientDef
from mcp_lab.runners.clients.matrix import CHECKPOINT_BOXES, NOTICE, PUSH, Check, ClientRow
from mcp_lab.runners.clients.model import PULL, SCORED, ModelRecord
from mcp_lab.runners.clients.tools import VIA_SERVER_TOOL
from mcp_lab.scenarios.scenario import Scenario

if TYPE_CHECKING:  # the runs module imports this one
    from mcp_lab.runners.clients.runs import ClientOutcome

_TAIL = 200  # what a note quotes of a client's output: its error line whole, at least
_ERROR_LINE_CHARS = 1000  # an error line longer than this is cut (said so)
# A line of output that names the error: ImportError: ..., Error: ..., error: ...
_ERROR_WORDS = re.compile(r"^(\w+\.)*\w*(Error|Exception)\b|\berror\b|\bfatal\b", re.IGNORECASE)
_ERROR_SEARCH_LINES = 20  # the error line is looked for among this many last lines


def client_row(
    spec: ClientDef,
    version: str,
    scenario: Scenario,
    setup: str,
    outcomes: dict[str, ClientOutcome | str],
) -> ClientRow:
    """The row of ``spec`` in ``scenario`` and ``setup`` from its runs, by script (a str:
    the runner could not make that run)."""
    row = ClientRow(spec.name, version, scenario.name, setup)
    scored = outcomes[SCORED]
    if isinstance(scored, str):
        return row.fail(scored)
    row.exit_code = scored.exit_code
    row.runs = {scored.script: str(scored.folder)}
    mine = _evidence(spec, scored, row)
    record = scored.record
    if record is not None:
        row.model = record.to_json()
        # The server cannot see level 7; the model can: its own notes say what it saw.
        row.notes = [n for n in row.notes if n != levels.LEVEL_7_UNSEEN]
        if record.reflected is not None:
            row.reflected = record.reflected.kind
            box = Check(row.reflected, _after(scored, record.reflected.at_ms))
        elif record.update_applied_ms is not None:
            row.reflected, box = "no", Check("no")
        else:  # the update was never applied: nothing was observed
            row.reflected, box = None, Check("-")
        row.checklist["reflected"] = box
        row.notes += _model_notes(record, scored)
    else:
        row.checklist["reflected"] = Check("n/a")
    assert row.server_level is not None
    row.level = 7 if row.reflected in (PUSH, NOTICE) else row.server_level
    if row.level == 7 and row.server_level < 6:
        row.notes.append(
            f"level 7 by {row.reflected} with the lab's evidence at level {row.server_level}"
        )
    pull = outcomes.get(PULL)
    if pull is not None:
        _pull(row, pull)
    _wire(row, scored, mine)
    _run_notes(row, scored)
    why = _runner_failure(scored)
    if why:  # the run says nothing of the client: no box answers "no" for it
        row.checklist = {k: c for k, c in row.checklist.items() if c.answer not in ("no", "-")}
        return row.fail(why)
    return row


def _after(outcome: ClientOutcome, at_ms: int | None) -> float | None:
    return None if at_ms is None else round((at_ms - outcome.started_ms) / 1000, 1)


def _evidence(spec: ClientDef, outcome: ClientOutcome, row: ClientRow) -> list[levels.ClientScore]:
    """The lab's scores of the client (its clientInfo): levels 1-6 and the scenario's
    own checkpoints of the row."""
    clients = outcome.report.clients if outcome.report is not None else []
    mine = [c for c in clients if c.client == spec.client_info]
    if spec.client_info == ANY_CLIENT:  # a command of unknown name: whoever connected
        mine = [c for c in clients if c.client != protocol.UNKNOWN_CLIENT]
    elif not mine:
        mine = [c for c in clients if c.client != protocol.UNKNOWN_CLIENT]
        if mine:
            names = ", ".join(sorted({f"{c.client}/{c.version}" for c in mine}))
            row.notes.append(f"sent clientInfo {names} (expected {spec.client_info})")
    if not mine:
        row.server_level = 0
        for box in CHECKPOINT_BOXES.values():
            row.checklist[box] = Check("no")
        row.notes.append("never connected to the lab")
        return mine
    best = max(mine, key=lambda c: c.level)
    session = best.best
    row.client_info = f"{best.client}/{best.version}"
    row.protocol, row.lab_transport = session.protocol, session.transport
    row.server_level = best.level
    row.sessions = sum(len(c.sessions) for c in mine)
    for checkpoint, box in CHECKPOINT_BOXES.items():
        at = session.checkpoints[checkpoint]
        row.checklist[box] = Check("yes", _after(outcome, at)) if at else Check("no")
    row.checks = [
        {
            "key": c.key,
            "title": c.title,
            "answer": c.answer,
            "at_s": _after(outcome, c.at_ms),
            "ok": c.ok,  # what the ideal client does (check --format checks judges by it)
        }
        for c in session.checks
    ]
    row.notes += best.notes
    return mine


def _model_notes(record: ModelRecord, outcome: ClientOutcome) -> list[str]:
    notes = []
    if record.attached is not None:
        notes.append(
            "the resource was attached to the prompt (@lab:URI): its text reached the model"
            if record.attached
            else "the resource was not attached: the prompt's @lab:URI reached the model as "
            "plain text (the CLI did not resolve it in this mode)"
        )
    if record.read_tool is not None:
        whose = "the server's tool" if record.read_via == VIA_SERVER_TOOL else "its tool"
        notes.append(f"the model read once, through {whose} {record.read_tool}")
    if record.waits:
        notes.append(
            f"the CLI asked its model before its MCP servers were up; the model called its "
            f"wait tool {record.waits} time(s) first"
        )
    if record.templates_tool is not None:
        notes.append(f"the model listed the templates first, through {record.templates_tool}")
    if record.searches:
        notes.append(f"the model loaded deferred tools first: {'; '.join(record.searches)}")
    if record.read_results and not record.versions_seen:
        first = record.read_results[0].replace("\n", " ")
        notes.append(f"the read tool gave the model no resource content: {first[:120]}")
    if record.tools_offered and record.read_tool is None and record.attached is None:
        notes.append(
            "no resource-read tool (nor the server's tool) offered to the model: "
            f"{record.tools_offered}"
        )
    if record.update_applied_ms is not None:
        steps = (
            f"{record.neutral_calls} neutral call(s) of {record.neutral_tool}"
            if record.neutral_calls
            else "no neutral tool offered, so no tool call"
        )
        turn = {None: "no continued turn", 0: "a continued turn"}.get(
            outcome.continued_exit, f"a continued turn that exited {outcome.continued_exit}"
        )
        notes.append(
            f"after the update: {steps}, {record.after_update} model request(s), then {turn}"
        )
    reflected = record.reflected
    if reflected is not None:
        what = "version 2" if reflected.kind == PUSH else "a notice that the resource changed"
        excerpt = " ".join(reflected.excerpt.split())[:120]
        notes.append(
            f"{reflected.kind}: {what} reached the model unasked "
            f"(model request {reflected.request}): {excerpt!r}"
        )
    elif record.update_applied_ms is not None:
        notes.append(
            "reflected: no: no model request after the update carried version 2 or a "
            "notice that it changed"
        )
    else:
        notes.append("reflected: not observed: the update was never applied in this run")
    if record.unserved:
        notes.append(
            f"the CLI asked the model endpoint for what it does not serve: {record.unserved}"
        )
    return notes


def _pull(row: ClientRow, pull: ClientOutcome | str) -> None:
    """The pull column: did version 2 reach the model (or, for the Inspector, did the
    client print it) when it was asked to read again?"""
    if isinstance(pull, str):
        row.checklist["pull"] = Check("-")
        row.notes.append(f"pull run: {pull}")
        return
    row.runs[pull.script] = str(pull.folder)
    if pull.timed_out:
        row.notes.append(f"pull run: {stopped(pull.plan.timeout)}")
    row.notes += [f"pull run: {note}" for note in pull.tap_notes]
    record = pull.record
    if record is not None:
        row.pull_model = record.to_json()
        failure = _runner_failure(pull)
        if failure:
            row.checklist["pull"] = Check("-")
            row.notes.append(f"pull run: runner failed: {failure}")
            return
        at = next(
            (ms for ms, text in zip(record.read_results_ms, record.read_results, strict=True)
             if any(v >= 2 for v in versions_in(text))),
            None,
        )  # fmt: skip
        row.pull = at is not None
        via = f" through {record.read_tool}" if record.read_tool else ""
    else:
        at = next(
            (
                e.ts_ms
                for e in pull.events
                if e.direction == "in"
                and e.method == protocol.READ
                and e.uri == pull.plan.uri
                and (e.version or 0) >= 2
            ),
            None,
        )
        row.pull = any(v >= 2 for v in pull.printed_versions)
        via = " (the runner's second resources/read)"
    row.checklist["pull"] = Check("yes", _after(pull, at)) if row.pull else Check("no")
    answer = "yes: version 2 came back" if row.pull else "no: version 2 did not come back"
    row.notes.append(f"read on request (pull, never a level): {answer} when asked{via}")


def _wire(row: ClientRow, outcome: ClientOutcome, mine: list[levels.ClientScore]) -> None:
    """Fill the checkpoints from the wire capture and name where it disagrees."""
    if not outcome.wire:
        return
    on_wire = {cp: False for cp in CHECKPOINT_BOXES}
    scenario = outcome.plan.scenario
    same = lambda uri: scenario.catalog.same_resource(uri, scenario.watched)  # noqa: E731
    for marks in wire.checklists(outcome.wire, outcome.plan.uri, same).values():
        for cp, at in marks.items():
            on_wire[cp] = on_wire[cp] or at is not None
    in_lab = {cp: False for cp in CHECKPOINT_BOXES}
    for client in mine:
        for session in client.sessions:
            for cp, at in session.checkpoints.items():
                in_lab[cp] = in_lab[cp] or at is not None
    row.wire = {CHECKPOINT_BOXES[cp]: seen for cp, seen in on_wire.items()}
    differ = [
        f"{CHECKPOINT_BOXES[cp]} (wire: {_yes(on_wire[cp])}, lab: {_yes(in_lab[cp])})"
        for cp in CHECKPOINT_BOXES
        if on_wire[cp] != in_lab[cp]
    ]
    if differ:
        row.notes.append(f"the wire capture disagrees with the lab's evidence: {', '.join(differ)}")


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def stopped(timeout: float) -> str:
    """What a run says of a client that never exited by itself."""
    return f"did not exit; stopped at --timeout {timeout:g} s"


def said(output: list[str], limit: int = _TAIL) -> str:
    """What a note quotes of a client's output (escaped, one line): its error line
    whole (the last line naming an error among the last ones, else its last line),
    with the lines around it as far as ``limit`` characters allow, whole lines only."""
    printed = [line.strip() for line in output if line.strip() and not line.startswith("$ ")]
    if not printed:
        return "it printed nothing"
    recent = printed[-_ERROR_SEARCH_LINES:]
    at = next((i for i in range(len(recent) - 1, -1, -1) if _ERROR_WORDS.search(recent[i])), None)
    at = len(recent) - 1 if at is None else at
    lines = [untrusted.shown(line, _ERROR_LINE_CHARS) for line in recent]
    kept, size = [lines[at]], len(lines[at])
    before, after = at - 1, at + 1
    while True:  # the line just before, then just after, while whole ones fit
        if after < len(lines) and size + len(lines[after]) + 3 <= limit:
            kept.append(lines[after])
            size, after = size + len(lines[after]) + 3, after + 1
        elif before >= 0 and size + len(lines[before]) + 3 <= limit:
            kept.insert(0, lines[before])
            size, before = size + len(lines[before]) + 3, before - 1
        else:
            break
    return " | ".join(kept)


def _run_notes(row: ClientRow, outcome: ClientOutcome) -> None:
    if outcome.timed_out:
        row.notes.append(stopped(outcome.plan.timeout))
    elif outcome.exit_code:
        row.notes.append(f"exit code {outcome.exit_code}: {said(outcome.output)}")
    row.notes += outcome.tap_notes


def _runner_failure(outcome: ClientOutcome) -> str | None:
    """Why a run says nothing about the client, if the runner itself failed."""
    record = outcome.record
    if record is None:
        return None
    if record.failure:
        return record.failure
    if record.requests == 0:
        if outcome.timed_out:
            return f"the CLI never reached the scripted model and {stopped(outcome.plan.timeout)}"
        return (
            "the CLI never reached the scripted model "
            f"(exit code {outcome.exit_code}): {said(outcome.output)}"
        )
    if not outcome.wire:
        return (
            "the CLI reached the scripted model but never contacted the lab (did it take "
            "the MCP configuration the runner wrote?)"
        )
    if record.api is None and record.unserved:
        return (
            "the CLI's model requests went where the scripted model does not serve: "
            f"{record.unserved}"
        )
    return None
