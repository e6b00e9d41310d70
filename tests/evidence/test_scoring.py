"""Scoring over recorded event sequences: every level, and the ways a flow falls short."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.evidence.build import Report
from mcp_lab.evidence.levels import CHECKPOINTS, LEVEL_NAMES
from mcp_lab.evidence.report import levels_json, to_json, to_markdown, to_table
from mcp_lab.evidence.scoring import score_clients, score_window
from mcp_lab.evidence.session_scoring import score_session
from mcp_lab.scenarios import registry
from tests.support.lab import ROOT

STATUS_URI = REVIEW_STATUS.uri


def report_of(clients) -> Report:
    return Report("0-0", None, registry.get("single"), clients, 0, 0)


UPDATED = "notifications/resources/updated"


def ev(
    ts,
    method,
    direction="in",
    *,
    session="s1",
    client="cli",
    uri=None,
    version=None,
    delivered=None,
    error=None,
) -> Event:
    return Event(
        ts,
        session,
        client,
        "1.0",
        "2025-11-25",
        "streamable-http",
        direction,
        method,
        uri,
        version,
        delivered,
        error,
    )


CONNECT = ev(1000, "initialize")
LIST = ev(1100, "resources/list")
READ_1 = ev(1200, "resources/read", uri=STATUS_URI, version=1)
SUBSCRIBE = ev(1300, "resources/subscribe", uri=STATUS_URI)
NOTIFIED = ev(6300, UPDATED, "out", uri=STATUS_URI, version=2, delivered=True)
DROPPED = ev(6300, UPDATED, "out", uri=STATUS_URI, version=2, delivered=False)
READ_2 = ev(6420, "resources/read", uri=STATUS_URI, version=2)


@pytest.mark.parametrize(
    ("events", "level"),
    [
        ([ev(900, "notifications/initialized")], 0),
        ([CONNECT], 1),
        ([CONNECT, LIST], 2),
        ([CONNECT, LIST, READ_1], 3),
        ([CONNECT, LIST, READ_1, SUBSCRIBE], 4),
        ([CONNECT, LIST, READ_1, SUBSCRIBE, NOTIFIED], 5),
        ([CONNECT, LIST, READ_1, SUBSCRIBE, NOTIFIED, READ_2], 6),
        ([ev(1000, "server/discover"), LIST], 2),
        ([CONNECT, READ_1, ev(1300, "subscriptions/listen", uri=STATUS_URI)], 4),
        # Levels 1-3: the highest with evidence, gaps allowed (a known URI read unlisted).
        ([CONNECT, READ_1], 3),
        # From 4 up, each level needs the one below it (from the read of version 1).
        ([CONNECT, ev(1300, "subscriptions/listen", uri=STATUS_URI)], 1),
        ([CONNECT, LIST, SUBSCRIBE, NOTIFIED, READ_2], 2),
    ],
)
def test_each_level_needs_its_evidence(events, level) -> None:
    assert score_session(events).level == level


def test_levels_from_subscribe_up_build_on_the_level_below() -> None:
    # Subscribe and the first read in either order; the notification after the subscribe.
    assert (
        score_session(
            [CONNECT, SUBSCRIBE, ev(1400, "resources/read", uri=STATUS_URI, version=1)]
        ).level
        == 4
    )
    # A notification delivered before this session's own subscribe is not its level
    # 5; one after the subscribe is.
    early = ev(1250, UPDATED, "out", uri=STATUS_URI, version=2, delivered=True)
    late_subscribe = ev(1400, "resources/subscribe", uri=STATUS_URI)
    score = score_session([CONNECT, READ_1, early, late_subscribe])
    assert score.level == 4 and score.checkpoints["notified"] is None
    assert "1 notification(s) delivered before the session's own subscribe: not counted" in (
        score.notes
    )
    after = ev(2400, UPDATED, "out", uri=STATUS_URI, version=3, delivered=True)
    assert score_session([CONNECT, READ_1, early, late_subscribe, after]).level == 5


def test_full_flow_has_every_checkpoint_and_the_reread_delay() -> None:
    score = score_session([READ_2, NOTIFIED, SUBSCRIBE, READ_1, LIST, CONNECT])  # any order
    assert score.level == 6
    assert score.checkpoints == {
        "connected": 1000,
        "discovered": 1100,
        "read_initial": 1200,
        "subscribed": 1300,
        "notified": 6300,
        "re_read": 6420,
    }
    assert score.reread_delay_ms == 120
    assert any("level 7" in note for note in score.notes)


def test_subscribed_but_the_notification_was_dropped() -> None:
    score = score_session([CONNECT, LIST, READ_1, SUBSCRIBE, DROPPED, READ_2])
    assert score.level == 4
    assert score.dropped_notifications == 1
    assert score.checkpoints["notified"] is None
    assert any("dropped" in note for note in score.notes)
    # The re-read without a delivered notification does not count as level 6.
    assert score.checkpoints["re_read"] is None
    assert any("without a delivered notification" in note for note in score.notes)


def test_a_dropped_notification_replayed_on_a_resumed_stream_counts_as_notified() -> None:
    resumed = Event(
        7000, "s1", "unknown", "?", "?", "streamable-http", "out", UPDATED, STATUS_URI,
        delivered=True, resumed=True,
    )  # fmt: skip
    read_2 = ev(7100, "resources/read", uri=STATUS_URI, version=2)
    score = score_session([CONNECT, LIST, READ_1, SUBSCRIBE, DROPPED, resumed, read_2])
    assert score.level == 6
    assert score.client == "cli"
    assert score.resumed_notifications == 1
    assert any(
        "1 notification(s) delivered on a stream the client resumed with Last-Event-ID; "
        "1 found no open stream when sent" in note
        for note in score.notes
    )
    assert not any("dropped" in note for note in score.notes)


def test_notified_but_never_reread() -> None:
    score = score_session([CONNECT, LIST, READ_1, SUBSCRIBE, NOTIFIED])
    assert score.level == 5
    assert "notified but never re-read" in score.notes


def test_read_before_the_notification_is_not_a_reread() -> None:
    early_v2 = ev(6000, "resources/read", uri=STATUS_URI, version=2)
    score = score_session([CONNECT, SUBSCRIBE, early_v2, NOTIFIED])
    assert score.level == 5
    assert score.checkpoints["re_read"] is None


def test_errors_and_other_uris_are_no_evidence() -> None:
    failed_subscribe = ev(1300, "resources/subscribe", uri=STATUS_URI, error=-32603)
    other = ev(1200, "resources/read", uri="test://other", version=1, error=-32002)
    assert score_session([CONNECT, other, failed_subscribe]).level == 1


def test_tool_calls_never_raise_the_level() -> None:
    tool = ev(1200, "tools/call")
    score = score_session([CONNECT, LIST, tool, tool])
    assert score.level == 2
    assert any("2 tool call(s)" in note for note in score.notes)


def test_tool_calls_of_every_session_are_counted_not_only_the_best_ones() -> None:
    # copilot 1.0.102: two sessions at level 1, its model called the tool in the second.
    first = [ev(1000, "initialize", session="a"), ev(1100, "tools/list", session="a")]
    second = [ev(3000, "initialize", session="b"), ev(3100, "tools/call", session="b")]
    (client,) = score_clients(first + second)
    assert client.best.session == "a"
    tool_notes = [n for n in client.notes if "tool call(s)" in n]
    assert tool_notes == ["1 tool call(s); tool calls never raise the level"]
    assert "2 sessions; scored by the best one" in client.notes


def test_a_client_is_scored_by_its_best_session_with_all_listed() -> None:
    first = [
        ev(t.ts_ms, t.method, t.direction, session="a", uri=t.uri, version=t.version)
        for t in (CONNECT, LIST)
    ]
    second = [
        ev(
            e.ts_ms + 10_000,
            e.method,
            e.direction,
            session="b",
            uri=e.uri,
            version=e.version,
            delivered=e.delivered,
        )
        for e in (CONNECT, LIST, READ_1, SUBSCRIBE, NOTIFIED, READ_2)
    ]
    other = [ev(500, "initialize", session="c", client="other")]
    clients = score_clients(first + second + other)
    assert [(c.client, c.level) for c in clients] == [("cli", 6), ("other", 1)]
    assert clients[0].best.session == "b"
    assert [s.session for s in clients[0].sessions] == ["a", "b"]
    assert any("2 sessions" in note for note in clients[0].notes)


def test_markdown_block_follows_the_compatibility_notes_layout() -> None:
    clients = score_clients([CONNECT, LIST, READ_1, SUBSCRIBE, NOTIFIED, READ_2])
    text = to_markdown(report_of(clients))
    lines = [line for line in text.splitlines() if line.startswith(("## ", "- "))]
    assert lines == [
        "## cli 1.0",
        "- MCP connection: yes, 2025-11-25 over streamable-http (1 session)",
        "- Calls resources/list? yes (00:00:01.100 UTC)",
        "- Calls resources/read? yes, version 1 (00:00:01.200 UTC)",
        "- Calls resources/subscribe? yes (00:00:01.300 UTC)",
        "- Receives notifications/resources/updated? yes, on an open stream (00:00:06.300 UTC)",
        "- Re-reads after the update? yes, at the notified version or later (00:00:06.420 UTC), "
        "0.120s after the notification",
        "- Notes: level 6 (re-read); whether the new content reached the model (level 7) "
        "is not visible here",
    ]


def test_table_names_every_level() -> None:
    clients = score_clients([CONNECT, LIST, READ_1])
    table = to_table(report_of(clients))
    assert "cli/1.0" in table and f"3 {LEVEL_NAMES[3]}" in table


def test_reread_after_a_hand_made_publish_counts_at_the_same_version() -> None:
    bare = ev(6300, UPDATED, "out", uri=STATUS_URI, version=1, delivered=True)
    reread = ev(6400, "resources/read", uri=STATUS_URI, version=1)
    score = score_session([CONNECT, LIST, READ_1, SUBSCRIBE, bare, reread])
    assert score.level == 6


def test_a_late_client_in_shared_scope_first_reads_a_later_version() -> None:
    late_read = ev(1200, "resources/read", uri=STATUS_URI, version=3)
    notified = ev(6300, UPDATED, "out", uri=STATUS_URI, version=4, delivered=True)
    reread = ev(6400, "resources/read", uri=STATUS_URI, version=4)
    score = score_session([CONNECT, LIST, late_read, SUBSCRIBE, notified, reread])
    assert score.level == 6
    assert score.checkpoints["read_initial"] == 1200
    assert any("first read saw version 3" in note for note in score.notes)


def test_a_level_reached_with_gaps_says_what_is_missing() -> None:
    score = score_session([CONNECT, READ_1])
    assert score.level == 3
    assert any("without: discovered" in n for n in score.notes)


def test_upper_checkpoints_without_the_chain_below_earn_nothing_and_say_why() -> None:
    score = score_session([CONNECT, SUBSCRIBE, NOTIFIED, READ_2])
    assert score.level == 1
    assert any(
        n.startswith("recorded subscribed, notified, re_read but not counted (no read_initial)")
        for n in score.notes
    ), score.notes


def test_the_report_and_the_readme_follow_the_declared_levels() -> None:
    declared = levels_json()
    assert declared["levels"] == {str(n): name for n, name in LEVEL_NAMES.items()}
    assert [c["key"] for c in declared["checkpoints"]] == list(CHECKPOINTS)
    assert [c["level"] for c in declared["checkpoints"]] == list(range(1, len(CHECKPOINTS) + 1))
    readme = (ROOT / "README.md").read_text().splitlines()
    table = readme[readme.index("| level | name | evidence |") + 2 :]
    rows = table[: next(i for i, line in enumerate(table) if not line.startswith("|"))]
    assert [tuple(cell.strip() for cell in row.split("|")[1:3]) for row in rows] == [
        (str(n), name) for n, name in LEVEL_NAMES.items()
    ]


def test_a_session_whose_server_died_is_not_told_it_never_re_read() -> None:
    gone = Event(
        7000, "s1", "unknown", "?", "?", "streamable-http", "out", "session/end",
        STATUS_URI, 2, reason="replica-gone",
    )  # fmt: skip
    score = score_session([CONNECT, LIST, READ_1, SUBSCRIBE, NOTIFIED, gone])
    assert score.level == 5
    assert "notified but never re-read" not in score.notes
    assert any(n.startswith("its server replica died with the session") for n in score.notes)


# The end of a session whose replica died, recorded without its client (contract.Peer).
GONE = Event(
    7000, "s1", "unknown", "?", "?", "streamable-http", "out", "session/end",
    STATUS_URI, 2, reason="replica-gone",
)  # fmt: skip


def test_a_session_begun_before_the_run_is_no_client_of_it() -> None:
    """After `mcp-lab reset` (and the restart of `up`), a session of the run before
    ends: its only events in the new run are its end. It is no client of this run
    (no "0 no connection" row, as if it had never connected); the report says what
    it left out and why."""
    old = "before-reset"
    tail = [
        ev(900, "stream/close", session="old", client=old),
        ev(950, "session/delete", session="old", client=old),
        ev(960, "ping", session="gone", client=old),
        replace(GONE, ts_ms=970, session="gone"),
    ]
    scores = score_window([*tail, CONNECT, LIST])
    assert [(c.client, c.level) for c in scores.clients] == [("cli", 2)]
    assert score_clients([*tail, CONNECT, LIST]) == scores.clients
    assert [s.session for s in scores.left_out.began_earlier] == ["old", "gone"]
    assert scores.left_out.without_identity == {}

    made = Report("1-0", None, registry.get("single"), scores.clients, 0, 0, None,
                  left_out=scores.left_out)  # fmt: skip
    note = (
        "2 sessions begun before this run left out (not scored here: their connect came "
        "earlier; their only events here: stream/close, session/delete, ping, session/end): "
        f"{old}/1.0"
    )
    assert f"note: {note}\n" in to_table(made)
    assert f"> Note: {note}." in to_markdown(made)
    left = to_json(made)["left_out"]
    assert left["notes"] == [note]
    assert left["began_earlier"] == [
        {"client": old, "version": "1.0", "events": {"stream/close": 1, "session/delete": 1}},
        {"client": old, "version": "1.0", "events": {"ping": 1, "session/end": 1}},
    ]


def test_only_a_closed_stream_makes_no_client() -> None:
    """The one event of a session in a run that never connected in it: no client
    (the level table has no row "0 no connection" for a client that did connect)."""
    scores = score_window([ev(900, "stream/close", session="old")])
    assert scores.clients == []
    assert [s.client for s in scores.left_out.began_earlier] == ["cli"]
    made = Report("1-0", None, registry.get("single"), [], 0, 0, left_out=scores.left_out)
    assert "no client has connected in this window" in to_table(made)


def modern(ts: int, method: str, client: str = "unknown", version: str = "?") -> Event:
    return Event(
        ts, f"modern:{client}/{version}", client, version, "2026-07-28", "streamable-http",
        "in", method,
    )  # fmt: skip


def test_messages_without_a_clients_identity_make_no_client() -> None:
    """A 2026-07-28 notification carries no clientInfo (keyed ``modern:unknown/?``): not
    a client at level 0, but counted as what it is."""
    cancelled = [modern(900, "notifications/cancelled"), modern(950, "notifications/cancelled")]
    named = [
        modern(1000, "server/discover", "agent", "1.0.102"),
        modern(1100, "resources/list", "agent", "1.0.102"),
    ]
    scores = score_window([*cancelled, *named])
    assert [(c.client, c.version, c.level) for c in scores.clients] == [("agent", "1.0.102", 2)]
    assert scores.left_out.without_identity == {"notifications/cancelled": 2}
    assert scores.left_out.began_earlier == []
    made = Report("1-0", None, registry.get("single"), scores.clients, 0, 0, None,
                  left_out=scores.left_out)  # fmt: skip
    note = (
        "2 messages without a client's identity (no clientInfo, no session of a named "
        "client; not a client): notifications/cancelled (2)"
    )
    assert f"note: {note}\n" in to_table(made)
    assert "unknown/?" not in to_table(made)
    assert to_json(made)["left_out"]["without_identity"] == {"notifications/cancelled": 2}
    # A client that never names itself but asks is a client all the same.
    nameless = [modern(1200, "server/discover"), modern(1300, "resources/list")]
    scores = score_window([*cancelled, *nameless])
    assert [(c.client, c.level) for c in scores.clients] == [("unknown", 2)]
    assert scores.left_out.without_identity == {}
