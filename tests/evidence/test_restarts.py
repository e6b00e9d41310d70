"""A Redis that came back without its data: the restored subscriptions' evidence,
scored as subscribes, and the report's note (issue 44, item 4)."""

from __future__ import annotations

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.evidence.build import Report
from mcp_lab.evidence.html_report import to_html
from mcp_lab.evidence.report import to_json, to_markdown, to_table
from mcp_lab.evidence.restarts import RESTORED, restart_note
from mcp_lab.evidence.scoring import score_clients
from mcp_lab.evidence.session_scoring import score_session
from mcp_lab.scenarios import registry

URI = REVIEW_STATUS.uri
UPDATED = "notifications/resources/updated"
NEVER = "read the resource but never subscribed"


def ev(ts: int, method: str, direction: str = "in", *, session: str = "s1", **more) -> Event:
    return Event(ts, session, "cli", "1.0", "2025-11-25", "streamable-http", direction, method,
                 **more)  # fmt: skip


def after_restart(session: str = "s1", restored: bool = True) -> list[Event]:
    """What is left of a flow whose evidence before the restart was lost: a read of
    version 1 after it, the restore (if any), the notification, the re-read."""
    events = [
        ev(2000, "resources/read", session=session, uri=URI, version=1),
        ev(3000, UPDATED, "out", session=session, uri=URI, version=2, delivered=True),
        ev(3100, "resources/read", session=session, uri=URI, version=2),
    ]
    if restored:
        events.append(ev(2500, RESTORED, "out", session=session, uri=URI, version=1))
    return events


def test_a_restored_subscription_counts_as_the_sessions_subscribe() -> None:
    score = score_session(after_restart())
    assert score.checkpoints["subscribed"] == 2500
    assert score.checkpoints["notified"] == 3000
    assert score.checkpoints["re_read"] == 3100
    assert NEVER not in score.notes
    assert any("subscription was restored" in note for note in score.notes), score.notes


def test_without_the_restore_it_reads_as_never_subscribed() -> None:
    """What the report said before: the subscribe's record was lost with the store."""
    score = score_session(after_restart(restored=False))
    assert score.checkpoints["subscribed"] is None
    assert NEVER in score.notes
    assert restart_note(score.events) is None


def test_a_restore_of_another_resource_is_no_subscribe_to_this_one() -> None:
    events = after_restart(restored=False)
    events.append(ev(2500, RESTORED, "out", uri="test://review/other", version=1))
    assert score_session(events).checkpoints["subscribed"] is None


def test_the_report_notes_the_restart_and_what_was_restored() -> None:
    events = after_restart("s1") + after_restart("s2")
    events.append(ev(2500, "resources/subscribe", session="s3", uri=URI))  # not restored
    report = Report("0-0", None, registry.get("single"), score_clients(events), 0, 0)
    note = to_json(report)["store_restarted"]
    assert note is not None
    assert "came back without its data at 00:00:02 UTC" in note
    assert "restored 2 subscription(s) of 2 session(s)" in note
    assert f"note: {note}" in to_table(report)
    assert f"> Note: {note}." in to_markdown(report)
    assert "restored 2 subscription(s) of 2 session(s)" in to_html(report)


def test_no_restart_no_note() -> None:
    clients = score_clients(after_restart(restored=False))
    report = Report("0-0", None, registry.get("single"), clients, 0, 0)
    assert to_json(report)["store_restarted"] is None
    assert "came back without its data" not in to_table(report)
