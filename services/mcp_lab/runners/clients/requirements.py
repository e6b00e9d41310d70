"""``mcp-lab check --format checks``: one check per client-side requirement, as the MCP
conformance suite reports them.

A :class:`Requirement` names one thing a subscription-aware client does that the lab
can judge from a check's verdict (:class:`~mcp_lab.runners.clients.check.Verdict`): its
row's checklist (connect, list, read, subscribe, notified, re-read, reflected), the
scenario's own checkpoints (``row.checks``) and the protocol the client negotiated
(which spec text the requirement comes from). Each is judged per verdict:

- ``SUCCESS``: the lab's evidence shows it (the details say what, and when);
- ``FAILURE``: it does not;
- ``NOT_TESTABLE``: its prerequisite is missing (a re-read after the notification
  cannot be judged for a client that was never notified). As in the conformance suite,
  that is not a pass: a baseline lists it like a failure.

A requirement that cannot apply is left out, not NOT_TESTABLE: the scenario-specific
ones outside their scenario, and level 7 (the model saw the new version) for a client
without a model. docs/requirements.md lists them all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_lab import protocol
from mcp_lab.runners.clients.matrix import NOTICE, PUSH, ClientRow
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.checks import NOT_ASKED

if TYPE_CHECKING:  # check.py may import this module: no cycle at run time
    from mcp_lab.runners.clients.check import Verdict

SUCCESS, FAILURE, NOT_TESTABLE = "SUCCESS", "FAILURE", "NOT_TESTABLE"
STATUSES = (SUCCESS, FAILURE, NOT_TESTABLE)
CLASSIC, MODERN = "2025-11-25", protocol.MODERN
_SPEC = "https://modelcontextprotocol.io/specification"
_SEP_2575 = "https://github.com/modelcontextprotocol/modelcontextprotocol/pull/2575"
_REACHED = frozenset({"yes", PUSH, NOTICE})
_FRACTION = re.compile(r"(\d+)/(\d+)")


@dataclass(frozen=True, slots=True)
class Ref:
    """One place in the spec: a revision's page and section, or a SEP."""

    id: str  # "2025-11-25 server/resources#subscriptions", "SEP-2575"
    url: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "url": self.url}


def spec(revision: str, page: str, section: str = "") -> Ref:
    anchor = f"#{section}" if section else ""
    return Ref(f"{revision} {page}{anchor}", f"{_SPEC}/{revision}/{page}{anchor}")


SEP_2575 = Ref("SEP-2575 (stateless MCP: server/discover, subscriptions/listen)", _SEP_2575)
_LISTEN = spec(MODERN, "basic/patterns/subscriptions")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One client-side requirement the lab judges (see the module docstring).

    It reads a checklist box (``box``) or one of the scenario's own checkpoints
    (``check``, by key); it applies in ``scenarios`` (empty: all of them); it is only
    testable when the requirement ``after`` succeeded (``missing`` says, for the ones
    that come after it, what was not there)."""

    id: str
    name: str
    description: str
    classic: tuple[Ref, ...]  # where the 2025-11-25 spec says it
    modern: tuple[Ref, ...]  # where the 2026-07-28 spec says it
    seen: str  # what the evidence shows when it holds ({uri}, {subscribe})
    missing: str  # "never subscribed": why what comes after it is not testable
    box: str | None = None
    check: str | None = None
    after: str | None = None
    scenarios: frozenset[str] = frozenset()
    # Of the 2026-07-28 revision only (a listen's duties): left out for a client that
    # negotiated 2025-11-25, which has no listen stream to owe them on.
    modern_only: bool = False

    def applies(self, scenario: str, negotiated: str = MODERN) -> bool:
        if self.modern_only and negotiated != MODERN:
            return False
        return not self.scenarios or scenario in self.scenarios

    def refs(self, negotiated: str) -> tuple[Ref, ...]:
        """The references for the protocol the client negotiated (both when unknown)."""
        if negotiated == MODERN:
            return self.modern
        if negotiated.startswith("20"):
            return self.classic
        return self.classic + tuple(r for r in self.modern if r not in self.classic)


_RESOURCES_CLASSIC = "server/resources"
REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        "client-connects",
        "connects",
        "The client connects and makes itself known: initialize (2025-11-25) or "
        "server/discover, or a request carrying its protocol version in _meta (2026-07-28).",
        (spec(CLASSIC, "basic/lifecycle", "initialization"),),
        (SEP_2575,),
        "{connect} answered",
        "never connected",
        box="connected",
    ),
    Requirement(
        "client-lists-resources",
        "lists resources",
        "The client lists the server's resources (resources/list). A MAY: a client told "
        "the URI need not, but most find the resource this way.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "listing-resources"),),
        (spec(MODERN, _RESOURCES_CLASSIC),),
        "resources/list answered",
        "never listed the resources",
        box="listed",
        after="client-connects",
    ),
    Requirement(
        "client-reads-resource",
        "reads the resource",
        "The client reads the scenario's resource (resources/read), version 1.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "reading-resources"),),
        (spec(MODERN, _RESOURCES_CLASSIC),),
        "resources/read of {uri} answered",
        "never read the resource",
        box="read",
        after="client-connects",
    ),
    Requirement(
        "client-subscribes-or-listens",
        "subscribes to the resource",
        "The client asks to be told when the resource changes: resources/subscribe with "
        "its URI (2025-11-25), or subscriptions/listen naming it in resourceSubscriptions "
        "(2026-07-28).",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "subscriptions"),),
        (_LISTEN, SEP_2575),
        "{subscribe}",
        "never subscribed",
        box="subscribed",
        after="client-connects",
    ),
    Requirement(
        "client-receives-updated",
        "receives notifications/resources/updated",
        "After its subscribe the client keeps a stream open on which the update reaches "
        "it (over HTTP: the GET stream in 2025-11-25, the listen stream in 2026-07-28).",
        (
            spec(CLASSIC, _RESOURCES_CLASSIC, "subscriptions"),
            spec(CLASSIC, "basic/transports", "listening-for-messages-from-the-server"),
        ),
        (_LISTEN,),
        "notifications/resources/updated of {uri} delivered to it",
        "never notified",
        box="notified",
        after="client-subscribes-or-listens",
    ),
    Requirement(
        "client-rereads-after-updated",
        "reads again after the update",
        "Told the resource changed, the client reads it again and gets the new version "
        "(the spec's message flow: notifications/resources/updated, then resources/read).",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "message-flow"),),
        (_LISTEN, spec(MODERN, _RESOURCES_CLASSIC)),
        "resources/read of {uri} at the new version after the notification",
        "never read again",
        box="re_read",
        after="client-receives-updated",
    ),
    Requirement(
        "client-reflects-update",
        "brings the new version to its model",
        "The new version reaches the model (pushed into its context, or a notice that it "
        "changed) without being asked. The lab's level 7, not a spec rule: the spec leaves "
        "how a host uses resources to it. Only judged for a client with a model.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "user-interaction-model"),),
        (spec(MODERN, _RESOURCES_CLASSIC),),
        "the model saw the new version",
        "the model never saw the new version",
        box="reflected",
        after="client-receives-updated",
    ),
    Requirement(
        "client-receives-each-updated",
        "receives every update",
        "With three updates a few seconds apart, every notification reaches the client: "
        "its stream stays open after the first.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "subscriptions"),),
        (_LISTEN,),
        "notified of each update",
        "missed an update",
        check="notified_each",
        after="client-subscribes-or-listens",
        scenarios=frozenset({"repeated"}),
    ),
    Requirement(
        "client-rereads-after-each-updated",
        "reads again after every update",
        "With three updates, the client reads the resource again after each one, not "
        "only after the first.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "message-flow"),),
        (_LISTEN,),
        "read again after each update",
        "did not read again after each update",
        check="re_read_each",
        after="client-receives-updated",
        scenarios=frozenset({"repeated"}),
    ),
    Requirement(
        "client-unsubscribes-when-done",
        "unsubscribes when done",
        "Once done with the resource the client ends its subscription: "
        "resources/unsubscribe or an HTTP DELETE of its session (2025-11-25), or closes "
        "its listen stream (2026-07-28).",
        (
            spec(CLASSIC, "schema"),
            spec(CLASSIC, "basic/transports", "session-management"),
        ),
        (_LISTEN,),
        "ended its subscription",
        "never unsubscribed",
        check="unsubscribed",
        after="client-subscribes-or-listens",
        scenarios=frozenset({"unsubscribe"}),
    ),
    Requirement(
        "client-receives-list-changed",
        "receives notifications/resources/list_changed",
        "The client keeps a stream on which notifications/resources/list_changed reaches "
        "it (2026-07-28: a listen with resourcesListChanged).",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "list-changed-notification"),),
        (_LISTEN,),
        "notifications/resources/list_changed delivered to it",
        "list_changed never delivered",
        check="list_changed",
        after="client-connects",
        scenarios=frozenset({"list-changed"}),
    ),
    Requirement(
        "client-relists-after-list-changed",
        "lists again after list_changed",
        "Told the list changed, the client lists the resources again.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "list-changed-notification"),),
        (_LISTEN, spec(MODERN, _RESOURCES_CLASSIC)),
        "resources/list answered after list_changed",
        "never listed again",
        check="relisted",
        after="client-receives-list-changed",
        scenarios=frozenset({"list-changed"}),
    ),
    Requirement(
        "client-reads-new-resource",
        "reads the new resource",
        "After list_changed the client reads the resource that appeared.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "reading-resources"),),
        (spec(MODERN, _RESOURCES_CLASSIC),),
        "resources/read of the new resource answered",
        "never read the new resource",
        check="read_new",
        after="client-receives-list-changed",
        scenarios=frozenset({"list-changed"}),
    ),
    Requirement(
        "client-lists-templates",
        "lists resource templates",
        "The client finds the resource template (resources/templates/list).",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "resource-templates"),),
        (spec(MODERN, _RESOURCES_CLASSIC),),
        "resources/templates/list answered",
        "never listed the templates",
        check="templates_listed",
        after="client-connects",
        scenarios=frozenset({"template"}),
    ),
    Requirement(
        "client-subscribes-to-template-resource",
        "subscribes to a template's resource",
        "The client subscribes to a concrete URI of the template like to any resource.",
        (spec(CLASSIC, _RESOURCES_CLASSIC, "subscriptions"),),
        (_LISTEN,),
        "subscribed to a resource of the template",
        "never subscribed to a resource of the template",
        check="concrete_subscribed",
        after="client-connects",
        scenarios=frozenset({"template"}),
    ),
    Requirement(
        "client-stops-at-graceful-close",
        "stops at the final result",
        "The final {resultType: complete} result ends the subscription: the client does "
        "not open a new listen in a loop on it (only a drop without it is reconnected).",
        (),
        (spec(MODERN, "basic/patterns/subscriptions"),),
        "no new listen after the server's final result",
        "its listen stream never ended",
        check="relistened",
        after="client-subscribes-or-listens",
        scenarios=frozenset({"graceful-close"}),
        modern_only=True,
    ),
    Requirement(
        "client-notices-unacknowledged",
        "notices a URI the ack leaves out",
        "The acknowledgement lists only what the server honours; a URI it leaves out "
        "will never be notified, so the client reads it itself (or asks again).",
        (),
        (spec(MODERN, "basic/patterns/subscriptions"),),
        "read the URI the acknowledgement left out",
        "never listened",
        check="unwatched_read",
        after="client-subscribes-or-listens",
        scenarios=frozenset({"partial-ack"}),
        modern_only=True,
    ),
    Requirement(
        "client-relistens-after-drop",
        "listens again after a dropped stream",
        "A listen stream that ends without the final result is an abnormal drop: the "
        "client listens again (after a stdio reconnect it MUST), and so gets the update.",
        (),
        (spec(MODERN, "basic/patterns/subscriptions"),),
        "a new subscriptions/listen after the lab dropped the stream",
        "its listen stream was never dropped",
        check="relistened",
        after="client-subscribes-or-listens",
        scenarios=frozenset({"dropped-stream"}),
        modern_only=True,
    ),
    Requirement(
        "client-rereads-past-its-cache",
        "re-reads past its cache",
        "A notification invalidates a cached read: after it the client reads the "
        "resource from the server (version 2), not from a cache the ttlMs allowed.",
        (),
        (spec(MODERN, "server/utilities/caching"),),
        "resources/read after the notification answered version 2",
        "never notified",
        check="wire_re_read",
        after="client-receives-updated",
        scenarios=frozenset({"cached"}),
        modern_only=True,
    ),
)
BY_ID: dict[str, Requirement] = {r.id: r for r in REQUIREMENTS}


def ids() -> list[str]:
    return [r.id for r in REQUIREMENTS]


def _uri(scenario: str) -> str:
    try:
        return registry.get(scenario).read_uri
    except LookupError:
        return "the resource"


def _when(at_s: float | None) -> str:
    return "" if at_s is None else f" ({at_s:.1f} s after the client started)"


def _check_ok(found: dict[str, Any]) -> bool:
    """Whether one of the scenario's checkpoints was reached as the ideal client does:
    its ``ok`` when the row carries it, else from its answer ("no", "2/3": not)."""
    if "ok" in found:
        return bool(found["ok"])
    answer = str(found.get("answer", "no"))
    fraction = _FRACTION.fullmatch(answer)
    if fraction is not None:
        return fraction.group(1) == fraction.group(2)
    return answer != "no"


def _judge(req: Requirement, row: ClientRow, done: dict[str, str]) -> tuple[str, str]:
    """The requirement's status and details for ``row``; ``done``: the statuses of the
    requirements before it."""
    if req.after is not None and done.get(req.after) != SUCCESS:
        return NOT_TESTABLE, f"Not testable: {BY_ID[req.after].missing}"
    modern = row.protocol == MODERN
    uri = _uri(row.scenario)
    subscribe = (
        f"subscriptions/listen naming {uri} in resourceSubscriptions"
        if modern
        else f"resources/subscribe {uri} answered"
    )
    connect = {MODERN: "server/discover"}.get(row.protocol, "initialize")
    if not row.protocol.startswith("20"):  # never connected: no protocol to go by
        connect = "initialize or server/discover"
    seen = req.seen.format(uri=uri, subscribe=subscribe, connect=connect)
    if req.box is not None:
        box = row.checklist.get(req.box)
        if box is None or box.answer not in _REACHED:
            return FAILURE, f"not seen: {seen}"
        how = f" ({box.answer})" if box.answer in (PUSH, NOTICE) else ""
        return SUCCESS, f"{seen}{how}{_when(box.at_s)}"
    found = next((c for c in row.checks if c.get("key") == req.check), None)
    if found is None:
        return FAILURE, f"not seen: {seen} (the lab did not score it)"
    said = f"{found.get('title', req.check)}: {found.get('answer', '-')}"
    if str(found.get("answer", "")).startswith(NOT_ASKED):
        return NOT_TESTABLE, f"Not testable: {said}"
    if not _check_ok(found):
        return FAILURE, f"not seen: {seen} ({said})"
    return SUCCESS, f"{seen} ({said}){_when(found.get('at_s'))}"


def judged(row: ClientRow) -> list[dict[str, Any]]:
    """The row's checks, in the order of :data:`REQUIREMENTS` (none for a row the runner
    failed on: it has no evidence to judge)."""
    if row.runner_failed:
        return []
    done: dict[str, str] = {}
    checks = []
    for req in REQUIREMENTS:
        if not req.applies(row.scenario, row.protocol) or (
            req.box == "reflected" and not row.model
        ):
            continue
        status, details = _judge(req, row, done)
        done[req.id] = status
        checks.append(
            {
                "id": req.id,
                "name": req.name,
                "description": req.description,
                "status": status,
                "specReferences": [ref.to_json() for ref in req.refs(row.protocol)],
                "details": details,
            }
        )
    return checks


def run_json(verdict: Verdict) -> dict[str, Any]:
    """One check run (a scenario's verdict) with its checks."""
    row = verdict.row
    checks = judged(row)
    data: dict[str, Any] = {
        "client": row.client,
        "version": row.version,
        "client_info": row.client_info,
        "scenario": row.scenario,
        "transport": row.transport,
        "protocol": row.protocol,
        "level": row.level,
        "checks": checks,
        "summary": {s: sum(c["status"] == s for c in checks) for s in STATUSES},
        "notes": row.notes,
    }
    if row.runner_failed:
        data["runner_failed"] = row.runner_failed
    return data


def to_checks(verdicts: Iterable[Verdict]) -> str:
    """``--format checks``: a JSON list, one object per check run."""
    return json.dumps([run_json(v) for v in verdicts], indent=2)
