"""The evidence the lab could not record (its store unavailable) is said on the rows of
the sessions it belonged to: the report's note was one line for the whole run."""

from __future__ import annotations

import json
import time

import pytest
import redis

from mcp_lab import contract, protocol, state
from mcp_lab.evidence import build

pytestmark = pytest.mark.anyio


def _event(ts_ms: int, session: str, method: str, direction: str = "in") -> contract.Event:
    return contract.Event(
        ts_ms, session, "client-" + session, "1.0", "2025-11-25", "streamable-http",
        direction, method, uri="test://review/status",
    )  # fmt: skip


async def test_a_session_whose_evidence_was_lost_says_so_on_its_row(redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url)
    decoding = state.connect(redis_url)
    try:
        now = int(time.time() * 1000)
        for session in ("hit", "spared"):
            for offset, method in ((0, "initialize"), (10, protocol.READ)):
                raw.xadd(contract.EVENTS_STREAM, _event(now + offset, session, method).fields())
        # What the recorder writes once Redis takes writes again: 4 lost over 12 s, 3 of
        # them the session "hit"'s.
        raw.xadd(
            contract.EVENTS_LOST_STREAM,
            {"count": 4, "first_ms": now + 20, "last_ms": now + 12_020,
             "sessions": json.dumps({"hit": 3, "gone": 1})},
        )  # fmt: skip
        raw.xadd(contract.EVENTS_LOST_STREAM, {"count": "x", "sessions": "{not json"})
        report = await build.build(decoding, since_ms=now - 1_000)
        notes = {c.client: c.notes for c in report.clients}
        said = (
            "the lab's store was unavailable for at least 12 s: this verdict may be "
            "incomplete (3 event(s) of this session not recorded)"
        )
        assert said in notes["client-hit"], notes
        assert not any("store was unavailable" in n for n in notes["client-spared"]), notes
        assert report.missing == 4
    finally:
        raw.close()
        await decoding.aclose()
