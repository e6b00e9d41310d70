"""``mcp-lab check --format checks`` and ``--baseline``, from verdicts built by hand: one
check per requirement with its spec reference, NOT_TESTABLE when its prerequisite is
missing, the scenario's own checkpoints judged, and a baseline that fails on a new
failure and on a stale entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_lab.runners.clients import baseline, requirements
from mcp_lab.runners.clients.check import Verdict
from mcp_lab.runners.clients.matrix import Check, ClientRow
from mcp_lab.runners.clients.requirements import FAILURE, NOT_TESTABLE, SUCCESS

BOXES = ["connected", "listed", "read", "subscribed", "notified", "re_read"]
CORE = [
    "client-connects",
    "client-lists-resources",
    "client-reads-resource",
    "client-subscribes-or-listens",
    "client-receives-updated",
    "client-rereads-after-updated",
]


def row(reached: list[str], scenario: str = "single", protocol: str = "2026-07-28") -> ClientRow:
    made = ClientRow("ideal-client", "local", scenario, "no tool", protocol=protocol,
                     transport="http", level=len(reached))  # fmt: skip
    made.client_info = "ideal-client/1.0"
    made.checklist = {b: Check("yes", 1.5) if b in reached else Check("no") for b in BOXES}
    made.checklist["reflected"] = Check("n/a")
    return made


def statuses(made: ClientRow) -> dict[str, str]:
    return {c["id"]: c["status"] for c in requirements.judged(made)}


def test_the_ideal_flow_passes_every_core_check_with_the_spec_of_its_protocol() -> None:
    (run,) = json.loads(requirements.to_checks([Verdict(row(BOXES), 6)]))
    assert (run["client"], run["version"], run["scenario"], run["transport"]) == (
        "ideal-client", "local", "single", "http",
    )  # fmt: skip
    assert [c["id"] for c in run["checks"]] == CORE  # no model: level 7 is left out
    assert run["summary"] == {SUCCESS: 6, FAILURE: 0, NOT_TESTABLE: 0}
    listen = run["checks"][3]
    assert set(listen) == {"id", "name", "description", "status", "specReferences", "details"}
    assert "subscriptions/listen naming test://review/status" in listen["details"]
    assert "1.5 s after the client started" in listen["details"]
    refs = [ref["id"] for ref in listen["specReferences"]]
    assert refs[0] == "2026-07-28 basic/patterns/subscriptions" and "SEP-2575" in refs[1]
    # A 2025-11-25 client is held to resources/subscribe and that revision's page.
    classic = requirements.judged(row(BOXES, protocol="2025-11-25"))[3]
    assert classic["details"].startswith("resources/subscribe test://review/status")
    assert [r["url"] for r in classic["specReferences"]] == [
        "https://modelcontextprotocol.io/specification/2025-11-25/server/resources#subscriptions"
    ]


def test_a_missing_prerequisite_makes_what_follows_not_testable() -> None:
    # read, never subscribed: the subscribe fails, notified and re-read cannot be judged
    got = requirements.judged(row(["connected", "listed", "read"]))
    by_id = {c["id"]: c for c in got}
    assert by_id["client-subscribes-or-listens"]["status"] == FAILURE
    assert by_id["client-receives-updated"]["status"] == NOT_TESTABLE
    assert by_id["client-receives-updated"]["details"] == "Not testable: never subscribed"
    assert by_id["client-rereads-after-updated"]["details"] == "Not testable: never notified"
    # never connected: everything after it is not testable, nothing passes
    nothing = statuses(row([], protocol="-"))
    assert nothing["client-connects"] == FAILURE
    first = requirements.judged(row([], protocol="-"))[0]
    assert first["details"] == "not seen: initialize or server/discover answered"
    assert len(first["specReferences"]) == 2  # no protocol: both revisions' references
    assert set(list(nothing.values())[1:]) == {NOT_TESTABLE}
    # listing is no prerequisite of reading
    unlisted = statuses(row(["connected", "read"]))
    assert unlisted["client-lists-resources"] == FAILURE
    assert unlisted["client-reads-resource"] == SUCCESS


def test_the_scenarios_own_checkpoints_are_checks_of_that_scenario_only() -> None:
    repeated = row(BOXES, scenario="repeated")
    repeated.checks = [
        {"key": "notified_each", "title": "notified", "answer": "3/3", "at_s": 8.0},
        {"key": "re_read_each", "title": "re-read after each", "answer": "1/3", "at_s": 2.0},
    ]
    got = {c["id"]: c for c in requirements.judged(repeated)}
    assert got["client-receives-each-updated"]["status"] == SUCCESS
    assert got["client-rereads-after-each-updated"]["status"] == FAILURE
    assert "re-read after each: 1/3" in got["client-rereads-after-each-updated"]["details"]
    assert "client-unsubscribes-when-done" not in got  # another scenario's
    assert "client-receives-each-updated" not in statuses(row(BOXES))
    # list-changed never delivered: its follow-ups are not testable
    listed = row(BOXES[:4], scenario="list-changed")
    listed.checks = [{"key": "list_changed", "title": "list_changed delivered", "answer": "no"}]
    said = statuses(listed)
    assert said["client-receives-list-changed"] == FAILURE
    assert said["client-relists-after-list-changed"] == NOT_TESTABLE
    assert said["client-reads-new-resource"] == NOT_TESTABLE
    # template: the concrete URI subscribed to is the answer; "ok" wins when carried
    template = row(["connected"], scenario="template")
    template.checks = [
        {"key": "templates_listed", "title": "templates listed", "answer": "yes", "ok": False},
        {"key": "concrete_subscribed", "title": "subscribed", "answer": "test://review/42"},
    ]
    said = statuses(template)
    assert said["client-lists-templates"] == FAILURE
    assert said["client-subscribes-to-template-resource"] == SUCCESS


def test_level_7_is_judged_only_with_a_model_and_a_runner_failure_has_no_checks() -> None:
    pushed = row(BOXES, scenario="attached")
    pushed.model = {"reflected": "push"}
    pushed.checklist["reflected"] = Check("push", 4.0)
    got = requirements.judged(pushed)[-1]
    assert (got["id"], got["status"]) == ("client-reflects-update", SUCCESS)
    assert "(push)" in got["details"]
    pushed.checklist["reflected"] = Check("no")
    assert requirements.judged(pushed)[-1]["status"] == FAILURE
    failed = row(BOXES).fail("the lab did not start")
    (run,) = json.loads(requirements.to_checks([Verdict(failed, 6)]))
    assert run["checks"] == [] and run["runner_failed"] == "the lab did not start"


def write(tmp_path: Path, entries: list[dict[str, Any]]) -> baseline.Baseline:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"expected_failures": entries}))
    return baseline.load(path)


def test_a_baseline_passes_on_exactly_its_failures_and_fails_on_new_or_stale(
    tmp_path: Path,
) -> None:
    verdicts = [Verdict(row(["connected", "listed", "read"]), 6)]
    failing = ["client-subscribes-or-listens", "client-receives-updated",
               "client-rereads-after-updated"]  # fmt: skip
    exact = write(tmp_path, [{"scenario": "single", "check": c} for c in failing])
    code, lines = baseline.judge(exact, verdicts)
    assert code == 0, lines
    assert "known failure: ideal-client in single: client-receives-updated NOT_TESTABLE" in lines
    assert lines[-1].endswith("the failures are exactly its 3")
    # one left out: a new failure, said with its details
    code, lines = baseline.judge(write(tmp_path, [{"scenario": "single", "check": failing[0]}]),
                                 verdicts)  # fmt: skip
    assert code == 1
    assert (
        "new failure: ideal-client in single: client-receives-updated NOT_TESTABLE: "
        "Not testable: never subscribed"
    ) in lines
    # an entry that now passes: stale, naming the file to edit
    stale = write(tmp_path, [*({"scenario": "single", "check": c} for c in failing),
                             {"scenario": "single", "check": "client-reads-resource"}])  # fmt: skip
    code, lines = baseline.judge(stale, verdicts)
    assert code == 1
    assert (f"stale: ideal-client in single: client-reads-resource now passes; remove it "
            f"from {stale.path}") in lines  # fmt: skip
    # another client's entry, or another scenario's, is not this run's
    other = write(
        tmp_path, [{"scenario": "single", "check": c, "client": "other"} for c in failing]
    )
    assert baseline.judge(other, verdicts)[0] == 1
    elsewhere = write(tmp_path, [{"scenario": "repeated", "check": "client-reads-resource"}])
    assert baseline.judge(elsewhere, [Verdict(row(BOXES), 6)])[0] == 0
    # a run the runner failed on has nothing to compare: it fails
    code, lines = baseline.judge(exact, [Verdict(row(BOXES).fail("timed out"), 6)])
    assert code == 1 and lines[0].startswith("not judged: ideal-client in single")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[]", "needs"),
        ("{not json", "is not JSON"),
        ('{"expected_failures": [{"scenario": "single"}]}', "'check' must be a string"),
        ('{"expected_failures": [{"scenario": "single", "check": "nope"}]}', "unknown check"),
        ('{"expected_failures": [{"scenario": "nope", "check": "client-connects"}]}',
         "unknown scenario"),
        ('{"expected_failures": [{"scenario": "single", '
         '"check": "client-unsubscribes-when-done"}]}', "not a check of scenario single"),
        ('{"expected_failures": [{"scenario": "single", "check": "client-connects", '
         '"why": 1}]}', "unknown field(s) why"),
    ],
)  # fmt: skip
def test_a_baseline_that_cannot_be_used_is_refused(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(baseline.BaselineError) as raised:
        baseline.load(path)
    assert said in str(raised.value)
    with pytest.raises(baseline.BaselineError, match="cannot read"):
        baseline.load(tmp_path / "missing.json")


def test_every_requirement_has_a_reference_for_both_revisions_and_a_page_in_the_docs() -> None:
    """Each has a reference in each revision it applies to (a listen's duty only in
    2026-07-28), and a line in docs/requirements.md."""
    from tests.support.lab import ROOT

    page = (ROOT / "docs" / "requirements.md").read_text()
    for req in requirements.REQUIREMENTS:
        assert req.modern and (req.classic or req.modern_only), req.id
        assert f"`{req.id}`" in page, req.id
        for ref in (*req.classic, *req.modern):
            assert ref.url.startswith("https://"), ref


def test_the_listen_duties_are_checks_of_a_2026_07_28_client_only() -> None:
    """graceful-close, partial-ack, cached and dropped-stream: judged by their own checkpoints for a
    client that listened; left out for one that negotiated 2025-11-25 (it owes them on
    no listen stream: its checkpoint says "not supported")."""
    cases = {
        "graceful-close": ("relistened", "client-stops-at-graceful-close", "2", False),
        "partial-ack": ("unwatched_read", "client-notices-unacknowledged", "yes", True),
        "cached": ("wire_re_read", "client-rereads-past-its-cache", "yes", True),
        "dropped-stream": ("relistened", "client-relistens-after-drop", "no", False),
    }
    for scenario, (key, req_id, answer, ok) in cases.items():
        made = row(BOXES, scenario=scenario)
        made.checks = [{"key": key, "title": key, "answer": answer, "at_s": 3.0, "ok": ok}]
        assert statuses(made)[req_id] == (SUCCESS if ok else FAILURE), scenario
        classic = row(BOXES, scenario=scenario, protocol="2025-11-25")
        classic.checks = [{"key": key, "title": key, "answer": "not supported", "ok": True}]
        assert req_id not in statuses(classic), scenario
    # cached: never notified, so the re-read past the cache cannot be judged
    unheard = row(BOXES[:4], scenario="cached")
    unheard.checks = [{"key": "wire_re_read", "title": "t", "answer": "no (not notified)"}]
    assert statuses(unheard)["client-rereads-past-its-cache"] == NOT_TESTABLE
    # partial-ack: a client whose listen never named the second URI was not asked
    named_one = row(BOXES, scenario="partial-ack")
    named_one.checks = [
        {"key": "unwatched_read", "title": "t", "answer": "not asked (no listen named it)"}
    ]
    assert statuses(named_one)["client-notices-unacknowledged"] == NOT_TESTABLE
