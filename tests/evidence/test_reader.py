"""The evidence stream read past garbage, and runs parted to the millisecond."""

from __future__ import annotations

import pytest
import redis

from services import contract, state
from services.evidence import reader

pytestmark = pytest.mark.anyio



async def test_the_dashboard_stream_helpers_see_past_garbage(redis_url) -> None:
    decoding = state.connect(redis_url)  # decodes replies, as the server's client does
    raw = redis.Redis.from_url(redis_url)
    try:
        assert await reader.last_event_id(decoding) == "0-0"
        garbage = raw.xadd(contract.EVENTS_STREAM, {b"\xff": b"\xfe"}).decode()
        assert await reader.last_event_id(decoding) == garbage
        assert await reader.wait_for_events(decoding, "0-0", 100) == garbage
        assert await reader.wait_for_events(decoding, garbage, 50) is None
        assert await reader.read_events(decoding, "-") == []
    finally:
        raw.close()
        await decoding.aclose()


async def test_a_run_parts_the_events_before_it_from_those_after_within_one_millisecond(
    redis_url,
) -> None:
    """Each stream numbers its own entries within a millisecond, so a run start
    written after an event of the same millisecond could get a smaller id than
    that event. An event of a later millisecond (a clock ahead) stands in for
    one recorded in the run start's own millisecond, later in its sequence."""
    decoding = state.connect(redis_url)
    raw = redis.Redis.from_url(redis_url)
    try:
        ahead = int(raw.time()[0]) * 1000 + 60_000
        before = raw.xadd(contract.EVENTS_STREAM, {b"x": b"1"}, id=f"{ahead}-7").decode()
        run_id = await reader.start_run(decoding)
        after = raw.xadd(contract.EVENTS_STREAM, {b"x": b"2"}).decode()
        assert key(before) < key(run_id) < key(after), (before, run_id, after)
        _, first, end = await reader.run_bounds(decoding, "0-0")
        assert end == f"({run_id}"
        earlier = raw.xrange(contract.EVENTS_STREAM, first, end)
        assert before in [entry_id.decode() for entry_id, _ in earlier]
        assert after not in [entry_id.decode() for entry_id, _ in earlier]
        # A second run at once, with no event between, still comes after the first.
        assert key(await reader.start_run(decoding)) > key(run_id)
    finally:
        raw.close()
        await decoding.aclose()


def key(entry_id: str) -> tuple[int, ...]:
    """A stream entry id, in the order Redis gives ids."""
    return tuple(int(part) for part in entry_id.split("-"))
