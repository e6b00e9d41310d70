"""Unit tests of the Redis contract's pure parts (no Redis needed)."""

from __future__ import annotations

import pytest

from mcp_lab import contract
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS, VERSION_PLACEHOLDER


def test_initial_text_is_the_seed_text() -> None:
    assert REVIEW_STATUS.initial("pending") == (
        "status: pending\nversion: 1\nmessage: Waiting for simulated review result."
    )


def test_updated_template_leaves_the_version_to_fill() -> None:
    template = REVIEW_STATUS.updated_template("reviewed")
    assert template.replace(VERSION_PLACEHOLDER, "2") == (
        "status: reviewed\nversion: 2\nmessage: Simulated review result is now available."
    )


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"test://review/status", [contract.UpdateMessage("test://review/status")]),
        ("  test://review/status\n", [contract.UpdateMessage("test://review/status")]),
        ('{"uri":"test://review/status"}', [contract.UpdateMessage("test://review/status")]),
        (
            '{"uri":"test://review/status","session":"abc","version":3}',
            [contract.UpdateMessage("test://review/status", "abc", 3)],
        ),
        (
            '{"uri":"test://review/status","session":"abc","version":3,"due":1700000000000}',
            [contract.UpdateMessage("test://review/status", "abc", 3, due_ms=1700000000000)],
        ),
        (
            '{"uri":"test://review/status","sessions":[["a",2,1700000000000],["b",5,null]]}',
            [
                contract.UpdateMessage("test://review/status", "a", 2, due_ms=1700000000000),
                contract.UpdateMessage("test://review/status", "b", 5),
            ],
        ),
    ],
)
def test_parse_update_messages_accepts_bare_uri_json_and_batches(payload, expected) -> None:
    assert contract.parse_update_messages(payload, LAB_CATALOG) == expected


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "empty"),
        (b"\xff\xfe", "UTF-8"),
        ("test://other", "unknown uri"),
        ("{not json", "invalid JSON"),
        ("[1, 2]", "unknown uri"),
        ('{"session": "x"}', "no string 'uri'"),
        ('{"uri": "test://review/status", "version": "2"}', "integer"),
        ('{"uri": "test://review/status", "version": true}', "integer"),
        ('{"uri": "test://review/status", "session": ""}', "non-empty"),
        ("x" * (contract.MAX_MESSAGE_BYTES + 1), "over"),
        ('{"uri": "test://review/status", "due": -1}', "outside"),
        ('{"uri": "test://review/status", "due": 1e3}', "integer"),
        ('{"uri": "test://review/status", "sessions": []}', "non-empty list"),
        ('{"uri": "test://review/status", "sessions": {"a": 1}}', "non-empty list"),
        ('{"uri": "test://review/status", "sessions": [["a", 2]]}', r"\[session, version, due\]"),
        ('{"uri": "test://review/status", "sessions": [["", 2, 1]]}', "non-empty string"),
        ('{"uri": "test://review/status", "sessions": [["a", "2", 1]]}', "integer"),
        ('{"uri": "test://review/status", "sessions": [["a", 2, true]]}', "integer"),
        ('{"uri": "test://other", "sessions": [["a", 2, 1]]}', "unknown uri"),
    ],
)
def test_parse_update_messages_rejects_garbage_with_a_reason(payload, reason) -> None:
    with pytest.raises(contract.BadMessage, match=reason):
        contract.parse_update_messages(payload, LAB_CATALOG)


def test_update_messages_round_trip() -> None:
    message = contract.UpdateMessage("test://review/status", "s1", 4, due_ms=1700000000123)
    assert contract.parse_update_messages(message.encode(), LAB_CATALOG) == [message]
    batch = contract.encode_updates("test://review/status", [("a", 2, 5), ("b", 3, None)])
    assert contract.parse_update_messages(batch, LAB_CATALOG) == [
        contract.UpdateMessage("test://review/status", "a", 2, due_ms=5),
        contract.UpdateMessage("test://review/status", "b", 3),
    ]


def test_job_fields_round_trip() -> None:
    job = contract.UpdateJob("test://review/status", "s1", 0.5)
    assert contract.parse_job(job.fields(), LAB_CATALOG) == job
    default = contract.UpdateJob("test://review/status", contract.ALL_SUBSCRIBERS)
    assert contract.parse_job(default.fields(), LAB_CATALOG) == default
    subscribed = contract.UpdateJob("test://review/status", "s1", while_subscribed=True)
    assert contract.parse_job(subscribed.fields(), LAB_CATALOG) == subscribed
    assert "while_subscribed" not in job.fields()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"uri": "test://nope"}, "unknown uri"),
        ({"uri": "test://review/status", "delay": "soon"}, "not a number"),
        ({"uri": "test://review/status", "delay": "-1"}, "outside"),
    ],
)
def test_parse_job_rejects_bad_fields(fields, reason) -> None:
    with pytest.raises(contract.BadMessage, match=reason):
        contract.parse_job(fields, LAB_CATALOG)


def test_scope_of_follows_the_state_scope_setting() -> None:
    assert contract.scope_of("abc", "session") == "abc"
    assert contract.scope_of("abc", "shared") == contract.SHARED_SCOPE


def test_entry_time_is_read_from_the_stream_id() -> None:
    assert contract.entry_time_ms("1700000000123-4") == 1700000000123
