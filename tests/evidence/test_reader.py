"""The evidence stream read past garbage, runs parted to the millisecond, each with its scenario."""

from __future__ import annotations

import pytest
import redis

from mcp_lab import contract, state
from mcp_lab.evidence import reader

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


async def test_a_run_remembers_the_scenario_it_was_played_under(redis_url) -> None:
    """`mcp-lab reset` records the scenario the lab plays in the run it begins; a server
    that starts playing another scenario begins a new run (none mixes two), and
    one that plays the run's own scenario does not."""
    decoding = state.connect(redis_url)
    raw = redis.Redis.from_url(redis_url)
    try:
        assert await reader.play_scenario(decoding, "repeated") is None  # nothing played yet
        assert await reader.run_scenario(decoding, "0-0") is None
        first = await reader.start_run(decoding)
        assert await reader.run_scenario(decoding, first) == "repeated"
        assert await reader.play_scenario(decoding, "repeated") is None  # the run's own
        began = await reader.play_scenario(decoding, "single")
        assert began is not None and began[1] == "repeated"
        assert key(began[0]) > key(first)
        assert raw.get(contract.SCENARIO_KEY) == b"single"
        assert await reader.run_scenario(decoding, began[0]) == "single"
        assert await reader.run_scenario(decoding, first) == "repeated"
        # Before the first run: what that run names as played before it.
        assert await reader.run_scenario(decoding, "0-0") == "repeated"
        # A scenario key that is not the lab's (a hash) neither fails a reset nor names
        # a scenario; a server's start replaces it.
        raw.delete(contract.SCENARIO_KEY)
        raw.hset(contract.SCENARIO_KEY, "not", "a name")
        unnamed = await reader.start_run(decoding)
        assert await reader.run_scenario(decoding, unnamed) is None
        assert await reader.play_scenario(decoding, "single") is None
        assert raw.get(contract.SCENARIO_KEY) == b"single"
    finally:
        raw.close()
        await decoding.aclose()


async def test_a_run_played_before_the_first_server_start_is_named_by_the_next_run(
    redis_url,
) -> None:
    """No reset yet (run 0-0), and the next `up` plays another scenario: a new run
    begins, and it remembers what 0-0 was played under."""
    decoding = state.connect(redis_url)
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.set(contract.SCENARIO_KEY, "repeated")  # what the last server played
        began = await reader.play_scenario(decoding, "single")
        assert began is not None and began[1] == "repeated"
        assert await reader.run_scenario(decoding, "0-0") == "repeated"
        assert await reader.run_scenario(decoding, began[0]) == "single"
    finally:
        raw.close()
        await decoding.aclose()
