"""A bridge's row, step by step, from the evidence of both sides.

Each step of the reference client's flow is marked from what the client saw (its step
lines), what reached the lab (the lab's evidence of the run, scored by the one report
builder) and the two wires:

- ``passed``: it went through both ways (a request reached the lab and its answer the
  client; a notification the lab sent reached the client);
- ``dropped``: the bridge lost it: a request that never reached the lab (refused or
  answered by the bridge itself), an answer that never came back, a notification the
  lab delivered to the bridge that never reached the client (or that the lab could
  not send, because the bridge kept no stream open to it, or no session: a stateless
  bridge whose subscribe and unsubscribe reach the lab in different sessions);
- ``not reached``: the flow stopped before this step (an earlier one was dropped);
- ``rewritten`` (initialize only): it went through, but the client was told other
  resource capabilities than the lab advertised;
- ``not supported``: this version of the bridge cannot run this direction at all (it
  has no option for it, :meth:`BridgeSpec.why_not`): nothing was run, nothing lost;
- ``-``: the step is not part of this scenario or direction.

A run in which a loop of the lab's own failed (its relay or updater restarted after
an unexpected error: a list_changed it was sending is lost) says so first in the
row's notes: what went missing then is the lab's doing, not the bridge's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_lab import protocol
from mcp_lab.contract import Event
from mcp_lab.protocol import Transport
from mcp_lab.runners.bridges.output import bridge_said
from mcp_lab.runners.bridges.run import BridgeOutcome, ProbeStep
from mcp_lab.runners.bridges.specs import BridgeSpec
from mcp_lab.runners.wire import CLIENT, LAB, WireMessage
from mcp_lab.scenarios.scenario import ADD, UPDATE, Scenario

PASSED, DROPPED, NOT_REACHED, REWRITTEN, NOT_SUPPORTED, NOT_APPLICABLE = (
    "passed", "dropped", "not reached", "rewritten", "not supported", "-",
)  # fmt: skip
MARKS = (PASSED, DROPPED, NOT_REACHED, REWRITTEN, NOT_SUPPORTED, NOT_APPLICABLE)
UPDATED = protocol.UPDATED
# The steps of a row, in order, with their column titles.
STEPS: dict[str, str] = {
    "initialize": "initialize",
    "list": "list",
    "read": "read",
    "subscribe": "subscribe at lab",
    "notified": "notified",
    "re_read": "re-read",
    "unsubscribe": "unsubscribe",
    "list_changed": "list_changed",
    "resume": "resume",
}
# The probe's failure step -> the row's step.
_FAILED_AT = {
    "connect": "initialize",
    "list": "list",
    "resource": "list",
    "subscribe": "subscribe",
    "notification": "notified",
    "list_changed": "list_changed",
    "new_resource": "list_changed",
    "unsubscribe": "unsubscribe",
}


@dataclass
class StepCell:
    """One step's mark, what it rests on, and (a notification) how late it came."""

    mark: str
    detail: str = ""
    count: str | None = None  # "3/3" where a step happens more than once
    late_ms: int | None = None  # a notification: from the lab's send to the client

    def text(self) -> str:
        parts = [self.mark]
        if self.count is not None:
            parts.append(self.count)
        if self.late_ms is not None:
            parts.append(f"{self.late_ms}ms")
        return " ".join(parts)


@dataclass
class BridgeRow:
    """One bridge in one direction and scenario (``-`` where it could not run)."""

    bridge: str
    version: str
    direction: str
    scenario: str
    steps: dict[str, StepCell] = field(default_factory=dict)
    client_protocol: str = "-"
    lab_protocol: str = "-"
    lab_level: int | None = None  # the lab's score of the bridge's best session
    lab_client: str = "-"  # the clientInfo the lab saw (the bridge's, or the client's)
    lab_sessions: int = 0
    notes: list[str] = field(default_factory=list)
    runs: dict[str, str] = field(default_factory=dict)  # run -> its folder
    failure: str | None = None  # why the runner could not make the run
    seconds: float = 0.0

    def fail(self, why: str) -> BridgeRow:
        self.failure = why
        self.notes.insert(0, f"runner failed: {why}")
        return self

    @property
    def not_supported(self) -> bool:
        """The bridge's version cannot run this direction (nothing was run)."""
        return bool(self.steps) and all(c.mark == NOT_SUPPORTED for c in self.steps.values())

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        data = asdict(self)
        data["marks"] = {key: cell.mark for key, cell in self.steps.items()}
        return data


@dataclass
class _Sides:
    """One run's evidence, read once."""

    outcome: BridgeOutcome
    scenario: Scenario
    uri: str

    def steps(self, name: str) -> list[ProbeStep]:
        return self.outcome.step(name)

    def lab_in(self, method: str, uri: str | None = None) -> list[Event]:
        return [
            e
            for e in self.outcome.events
            if e.direction == "in"
            and e.method == method
            and e.error is None
            and (uri is None or e.uri == uri)
        ]

    def lab_out(self, method: str, uri: str | None = None) -> list[Event]:
        return [
            e
            for e in self.outcome.events
            if e.direction == "out" and e.method == method and (uri is None or e.uri == uri)
        ]

    @property
    def failure(self) -> dict[str, Any] | None:
        summary = self.steps("summary")
        if summary and not summary[-1].fields.get("ok"):
            return summary[-1].fields
        return None

    @property
    def failed_at(self) -> str | None:
        failed = self.failure
        if failed is None:
            return None
        step = str(failed.get("failed_step"))
        if step == "read":  # the first read, or one after a notification
            return "re_read" if self.steps("subscribed") else "read"
        return _FAILED_AT.get(step, step)

    def said(self) -> str:
        failed = self.failure
        return str(failed.get("message", "")) if failed else ""


def _updates(scenario: Scenario, uri: str) -> int:
    if not scenario.starts_timeline(uri):
        return 1
    return sum(1 for a in scenario.timeline if a.kind == UPDATE and a.uri in (None, uri))


def _request(sides: _Sides, key: str, client_ok: bool, lab_ok: bool, reached: bool) -> StepCell:
    if client_ok and lab_ok:
        return StepCell(PASSED)
    if client_ok:
        return StepCell(DROPPED, "answered by the bridge itself; it never reached the lab")
    if not reached and sides.failed_at != key:
        return StepCell(NOT_REACHED, f"the flow stopped before it ({sides.failed_at} failed)")
    said = sides.said() or "no answer"
    if lab_ok:
        return StepCell(DROPPED, f"reached the lab; its answer never reached the client ({said})")
    return StepCell(DROPPED, f"never reached the lab; the client got: {said}")


def _norm(capability: dict[str, Any] | None) -> dict[str, Any]:
    return {k.replace("_", "").lower(): v for k, v in (capability or {}).items() if v}


def _initialize(sides: _Sides) -> StepCell:
    seen = sides.steps("capabilities")
    connected = sides.lab_in(protocol.INITIALIZE) or sides.lab_in(protocol.DISCOVER)
    cell = _request(sides, "initialize", bool(seen), bool(connected), True)
    if cell.mark != PASSED:
        return cell
    advertised = next(
        (m.resources for m in sides.outcome.lab_wire if m.sender == LAB and m.resources), None
    )
    client = seen[0].fields.get("resources")
    if advertised is not None and _norm(advertised) != _norm(client):
        return StepCell(
            REWRITTEN, f"resources capability {advertised} at the lab, {client} at the client"
        )
    return StepCell(PASSED, f"resources capability {client} as the lab advertised")


def _notified(sides: _Sides, expected: int, subscribed: bool) -> StepCell:
    if expected == 0:
        return StepCell(NOT_APPLICABLE)
    sent = sides.lab_out(UPDATED, sides.uri)
    delivered = [e for e in sent if e.delivered]
    got = sides.steps("notification_received")
    count = f"{min(len(got), expected)}/{expected}"
    if not subscribed and not got:
        return StepCell(NOT_REACHED, "no subscribe reached the lab", count)
    late = [g.at_ms - e.ts_ms for g, e in zip(got, delivered, strict=False)]
    if len(got) >= expected:
        first = late[0] if late else None
        return StepCell(PASSED, f"after the lab sent it: {late} ms", count, first)
    if len(delivered) > len(got):
        lost = len(delivered) - len(got)
        return StepCell(
            DROPPED,
            f"the lab delivered {len(delivered)} to the bridge on an open stream; "
            f"{lost} never reached the client",
            count,
        )
    if len(sent) > len(delivered):
        return StepCell(
            DROPPED,
            f"the lab sent {len(sent)}, {len(sent) - len(delivered)} to no open stream: the "
            "bridge kept no GET stream open to the lab",
            count,
        )
    if not sent and (gone := _sessionless(sides)):
        return StepCell(DROPPED, f"the lab sent none: {gone}", count)
    return StepCell(NOT_REACHED, f"the lab sent {len(sent)} (its update did not come)", count)


def _sessionless(sides: _Sides) -> str | None:
    """Why the lab had no one to send to, when the bridge keeps no session (a stateless
    server): the subscribe and the unsubscribe reached the lab in different sessions."""
    subscribed = {e.session for e in sides.lab_in(protocol.SUBSCRIBE, sides.uri)}
    unsubscribed = {e.session for e in sides.lab_in(protocol.UNSUBSCRIBE, sides.uri)}
    if not subscribed or not unsubscribed or subscribed & unsubscribed:
        return None
    return (
        "the bridge keeps no session (the subscribe and the unsubscribe reached the lab in "
        "different sessions): the session that subscribed was gone before the update"
    )


def _re_read(sides: _Sides, expected: int) -> StepCell:
    if expected == 0:
        return StepCell(NOT_APPLICABLE)
    got = len(sides.steps("notification_received"))
    client = [s for s in sides.steps("final_content") if s.fields.get("changed")]
    lab = [e for e in sides.lab_in(protocol.READ, sides.uri) if (e.version or 0) >= 2]
    count = f"{min(len(client), expected)}/{expected}"
    if got == 0:
        return StepCell(NOT_REACHED, "no notification reached the client", count)
    if len(client) >= got and len(lab) >= got:
        return StepCell(PASSED, "", count)
    if len(lab) > len(client):
        return StepCell(DROPPED, "the lab answered version 2+; the client did not get it", count)
    return StepCell(DROPPED, f"the client read {len(client)}, the lab saw {len(lab)}", count)


def _list_changed(sides: _Sides, subscribed_client: bool) -> StepCell:
    added = [a.uri for a in sides.scenario.timeline if a.kind == ADD]
    if not added:
        return StepCell(NOT_APPLICABLE)
    sent = sides.lab_out(protocol.LIST_CHANGED)
    delivered = [e for e in sent if e.delivered]
    got = sides.steps("list_changed")
    if got:
        new = sides.steps("new_resource")
        read_new = sides.lab_in(protocol.READ, added[0])
        if new and read_new:
            late = got[0].at_ms - delivered[0].ts_ms if delivered else None
            return StepCell(PASSED, f"listed again and read {added[0]}", late_ms=late)
        said = sides.said() or "not read"
        return StepCell(DROPPED, f"heard list_changed, but {added[0]}: {said}")
    if not subscribed_client:
        return StepCell(NOT_REACHED, "the flow stopped before it")
    if delivered:
        return StepCell(DROPPED, "the lab delivered it to the bridge; it never reached the client")
    if sent:
        return StepCell(DROPPED, "the lab sent it to no open stream (no GET stream to the lab)")
    if gone := _sessionless(sides):
        return StepCell(DROPPED, f"the lab sent none: {gone}")
    return StepCell(NOT_REACHED, "the lab sent none")


def _resume(outcome: BridgeOutcome | None, lab_side: Transport, notified: StepCell) -> StepCell:
    if lab_side != Transport.STREAMABLE_HTTP:
        return StepCell(NOT_APPLICABLE, "the lab side has no Last-Event-ID (stdio, SSE)")
    if outcome is None:
        return StepCell(NOT_APPLICABLE, "not run")
    if notified.mark != PASSED:
        return StepCell(NOT_REACHED, "no notification passes this bridge without a cut either")
    if outcome.failure:
        return StepCell(NOT_APPLICABLE, f"the resumption run failed: {outcome.failure}")
    cut = outcome.cut
    if cut is None or cut.at_ms is None:
        return _not_cut(outcome)
    if cut.streams == 0:
        return StepCell(NOT_REACHED, "the bridge had no GET stream open to the lab to cut")
    cut_at = cut.at_ms
    gets = [
        m
        for m in outcome.lab_wire
        if m.sender == LAB and m.http.startswith("GET") and m.status is not None
        and m.at_ms >= cut_at
    ]  # fmt: skip
    with_id = [m for m in gets if m.last_event_id]
    replayed = [e for e in outcome.events if e.method == UPDATED and e.resumed and e.delivered]
    got = outcome.step("notification_received")
    if got:
        how = "with Last-Event-ID: the update sent meanwhile was replayed" if with_id else (
            "without Last-Event-ID, and the update still came"
        )  # fmt: skip
        late = got[0].at_ms - (cut.sent_ms or cut_at)
        return StepCell(PASSED, f"reconnected {how}", late_ms=late)
    if with_id and replayed:
        return StepCell(DROPPED, "resumed with Last-Event-ID and the lab replayed the update; it "
                             "never reached the client")  # fmt: skip
    if with_id:
        return StepCell(DROPPED, "reconnected with Last-Event-ID; the lab replayed nothing")
    if gets:
        lost = "reconnected without Last-Event-ID: the update sent meanwhile is lost"
        return StepCell(DROPPED, lost)
    return StepCell(DROPPED, "never reconnected its GET stream after the cut")


def _not_cut(outcome: BridgeOutcome) -> StepCell:
    """The resumption run that never cut: the lab saw no subscribe, or saw it only after
    the runner stopped waiting for it (a bridge slower than the wait)."""
    subscribes = [
        e
        for e in outcome.events
        if e.direction == "in" and e.method == protocol.SUBSCRIBE and e.error is None
    ]
    if not subscribes:
        return StepCell(NOT_REACHED, "the subscribe never reached the lab")
    waited = outcome.cut.waited_s if outcome.cut is not None else None
    after = f" ({waited:.0f} s)" if waited is not None else ""
    return StepCell(
        NOT_APPLICABLE,
        f"not judged: the subscribe reached the lab after the runner stopped waiting for "
        f"it{after}, so nothing was cut",
    )


def _protocols(sides: _Sides, row: BridgeRow) -> None:
    seen = sides.steps("capabilities")
    if seen:
        row.client_protocol = str(seen[0].fields.get("protocol") or "-")
    working = {e.session for e in sides.outcome.events if e.method.startswith("resources/")}
    sessions = [e for e in sides.outcome.events if e.method in protocol.CONNECT_METHODS]
    mine = [e for e in sessions if e.session in working] or sessions
    if mine:
        row.lab_protocol = ", ".join(sorted({e.protocol for e in mine}))
        row.lab_client = ", ".join(sorted({f"{e.client}/{e.client_version}" for e in mine}))
    row.lab_sessions = len({e.session for e in sessions})


def _wires(sides: _Sides, row: BridgeRow) -> None:
    """Where a wire disagrees with what the client or the lab said, a note."""
    outcome = sides.outcome
    if not outcome.client_wire:
        row.notes.append("no message on the client-side wire")
    if not outcome.lab_wire:
        row.notes.append("no message on the lab-side wire")

    def updates(wire: list[WireMessage]) -> int:
        wanted = (LAB, UPDATED, sides.uri)
        return sum(1 for m in wire if (m.sender, m.method, m.uri) == wanted)

    client_wire = updates(outcome.client_wire)
    got = len(sides.steps("notification_received"))
    if outcome.client_wire and client_wire < got:
        row.notes.append(f"the client-side wire shows {client_wire} update(s), the client {got}")
    lab_wire = updates(outcome.lab_wire)
    delivered = len([e for e in sides.lab_out(UPDATED, sides.uri) if e.delivered])
    if outcome.lab_wire and lab_wire != delivered:
        row.notes.append(
            f"the lab-side wire shows {lab_wire} update(s), the lab's evidence {delivered} "
            "delivered"
        )
    asked = {m.method for m in outcome.client_wire if m.sender == CLIENT and m.method}
    reached = {m.method for m in outcome.lab_wire if m.sender == CLIENT and m.method}
    lost = sorted(m for m in asked - reached if m.startswith("resources/"))
    if outcome.lab_wire and lost:
        row.notes.append(f"on the client-side wire only (never on the lab's): {', '.join(lost)}")


def bridge_row(
    bridge: str, version: str, outcome: BridgeOutcome, resume: BridgeOutcome | None = None
) -> BridgeRow:
    """The row of one run (and, in ``single``, its resumption run)."""
    plan = outcome.plan
    row = BridgeRow(bridge, version, plan.direction.name, plan.scenario.name)
    row.runs[plan.label] = str(outcome.folder)
    if resume is not None:
        row.runs[resume.plan.label] = str(resume.folder)
    if outcome.failure:
        return row.fail(outcome.failure)
    sides = _Sides(outcome, plan.scenario, plan.scenario.read_uri)
    uri = sides.uri
    expected = _updates(plan.scenario, uri) if not any(
        a.kind == ADD for a in plan.scenario.timeline
    ) else 0  # fmt: skip
    steps = row.steps
    steps["initialize"] = _initialize(sides)
    connected = bool(sides.steps("capabilities"))
    listed = bool(sides.steps("resource"))
    read = bool(sides.steps("initial_content"))
    subscribed_client = bool(sides.steps("subscribed"))
    subscribed_lab = bool(sides.lab_in(protocol.SUBSCRIBE, uri))
    steps["list"] = _request(sides, "list", listed, bool(sides.lab_in(protocol.LIST)), connected)
    read_lab = [e for e in sides.lab_in(protocol.READ, uri) if e.version == 1]
    steps["read"] = _request(sides, "read", read, bool(read_lab), listed)
    steps["subscribe"] = _request(sides, "subscribe", subscribed_client, subscribed_lab, read)
    steps["notified"] = _notified(sides, expected, subscribed_lab)
    steps["re_read"] = _re_read(sides, expected)
    # The reference client unsubscribes after its flow, a notification missed or not.
    waited = sides.failed_at in (None, "notified", "list_changed", "unsubscribe")
    done = subscribed_client and waited
    unsubscribed = bool(sides.steps("unsubscribed"))
    steps["unsubscribe"] = _request(
        sides, "unsubscribe", unsubscribed, bool(sides.lab_in(protocol.UNSUBSCRIBE, uri)), done
    )
    steps["list_changed"] = _list_changed(sides, subscribed_client)
    steps["resume"] = (
        _resume(resume, plan.direction.lab, steps["notified"]) if plan.scenario.name == "single"
        else StepCell(NOT_APPLICABLE, "run in single only")
    )  # fmt: skip
    _protocols(sides, row)
    levels = [c.level for c in outcome.report.clients] if outcome.report else []
    row.lab_level = max(levels, default=0)
    for key, cell in steps.items():
        if key == "resume":
            continue  # said below, whatever its mark
        if cell.mark in (DROPPED, REWRITTEN, NOT_REACHED):
            row.notes.append(f"{STEPS[key]}: {cell.mark}: {cell.detail}")
    resumed = steps["resume"]
    if resumed.mark != NOT_APPLICABLE or resumed.detail.startswith("not judged"):
        row.notes.append(f"resume: {resumed.mark}: {resumed.detail}")
    if row.lab_sessions > 1:
        row.notes.append(f"the bridge opened {row.lab_sessions} sessions at the lab")
    _wires(sides, row)
    if steps["initialize"].mark != PASSED and outcome.bridge_output:
        said = bridge_said(outcome.bridge_output)
        if said:
            row.notes.append(f"the bridge said: {said}")
    for run in (r for r in (outcome, resume) if r is not None):
        for fault in run.lab_faults:
            row.notes.insert(
                0,
                f"the lab failed during the {run.plan.label} run, not the bridge: {fault}; "
                "a mark after it may be the lab's doing",
            )
    return row


def not_supported(spec: BridgeSpec, version: str, way: str, scenario: str, why: str) -> BridgeRow:
    """The row of a direction that ``version`` of the bridge cannot run: every step
    ``not supported``, and why."""
    row = BridgeRow(spec.name, version, way, scenario)
    row.steps = {key: StepCell(NOT_SUPPORTED, why) for key in STEPS}
    row.notes = [f"not supported: {why}"]
    return row


def with_caveat(spec: BridgeSpec, row: BridgeRow) -> BridgeRow:
    """``row`` with what every row of ``spec`` should say first (its set-up)."""
    if spec.caveat and not row.not_supported:
        row.notes.insert(0, spec.caveat)
    return row

