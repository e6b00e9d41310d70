"""A scenario's own handling of listen streams, raw and in memory (the lab's ASGI app).

``graceful-close`` (``Scenario.listen_close``): the update first, then, ``after``
seconds later, the final ``{resultType: "complete"}`` result tagged with the listen's
id, and the stream ends; a stream that has had no update is not ended. ``partial-ack``
(``Scenario.unacknowledged``): the acknowledgement leaves the second URI out.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import anyio
import pytest

from mcp_lab.catalog import REVIEW_NOTES
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import ListenClose, Scenario
from tests.server.test_conformance_2026 import (
    ACKNOWLEDGED,
    BOUND,
    CHANNEL,
    SUBSCRIPTION_ID,
    UPDATED,
    listen_stream,
)
from tests.support.lab import STATUS_URI

pytestmark = pytest.mark.anyio
AFTER = 0.4
NOTES_URI = REVIEW_NOTES.uri


@pytest.fixture
def closing_scenario() -> Iterator[Scenario]:
    """graceful-close, with a short pause before the end (the test's own name)."""
    played = dataclasses.replace(
        registry.get("graceful-close"),
        name="graceful-close-in-a-test",
        listen_close=ListenClose(after=AFTER, window=1.0),
    )
    registry.register(played)
    try:
        yield played
    finally:
        registry.forget(played.name)


async def test_the_stream_ends_with_its_final_result_after_the_update(
    inproc, redis_client, closing_scenario
) -> None:
    server, url = await inproc.server(update_delay_seconds="600", scenario=closing_scenario.name)
    async with listen_stream(url, "closed-1", resourceSubscriptions=[STATUS_URI]) as stream:
        assert (await stream.next_message(BOUND)).message["method"] == ACKNOWLEDGED
        await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
        assert redis_client.publish(CHANNEL, STATUS_URI) >= 1
        updated = (await stream.next_message(BOUND)).message
        notified = time.monotonic()
        assert updated["method"] == UPDATED, updated
        final = (await stream.next_message(BOUND)).message
        waited = time.monotonic() - notified
        with pytest.raises(AssertionError, match="stream ended"):
            await stream.next(BOUND)
    assert final["id"] == "closed-1" and final["result"]["resultType"] == "complete", final
    assert final["result"]["_meta"][SUBSCRIPTION_ID] == "closed-1", final
    assert waited >= AFTER * 0.9, waited  # the scenario's pause, not at once
    await server.await_line(r"\[subscriptions/listen\] closing gracefully 0.4 s after the update")


async def test_a_stream_without_an_update_stays_open(inproc, closing_scenario) -> None:
    _, url = await inproc.server(update_delay_seconds="600", scenario=closing_scenario.name)
    async with listen_stream(url, "open-1", resourceSubscriptions=[STATUS_URI]) as stream:
        assert (await stream.next_message(BOUND)).message["method"] == ACKNOWLEDGED
        with anyio.move_on_after(AFTER * 3) as quiet:
            extra = await stream.next_message(BOUND)
            raise AssertionError(f"the stream did not stay open: {extra.message}")
        assert quiet.cancelled_caught


async def test_other_scenarios_keep_their_streams_open_after_the_update(
    inproc, redis_client
) -> None:
    server, url = await inproc.server(update_delay_seconds="600")
    async with listen_stream(url, "open-2", resourceSubscriptions=[STATUS_URI]) as stream:
        assert (await stream.next_message(BOUND)).message["method"] == ACKNOWLEDGED
        await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
        assert redis_client.publish(CHANNEL, STATUS_URI) >= 1
        assert (await stream.next_message(BOUND)).message["method"] == UPDATED
        with anyio.move_on_after(AFTER * 3) as quiet:
            extra = await stream.next_message(BOUND)
            raise AssertionError(f"the stream ended: {extra.message}")
        assert quiet.cancelled_caught


async def test_partial_ack_leaves_the_second_uri_out_and_still_updates_the_first(
    inproc, redis_client
) -> None:
    """subscriptions.mdx, "Acknowledgment": the acknowledgement names "the subset the
    server agreed to honor". In ``partial-ack`` the lab leaves test://review/notes out
    and does not watch it; the watched resource's update still comes on the stream."""
    server, url = await inproc.server(update_delay_seconds="600", scenario="partial-ack")
    both = [STATUS_URI, NOTES_URI]
    async with listen_stream(url, "partial-1", resourceSubscriptions=both) as stream:
        ack = (await stream.next_message(BOUND)).message
        assert ack["method"] == ACKNOWLEDGED, ack
        assert ack["params"]["notifications"]["resourceSubscriptions"] == [STATUS_URI], ack
        await server.await_line(rf"\[subscriptions/listen\] uri={NOTES_URI} .*not acknowledged")
        await server.await_line(rf"\[subscriptions/listen\] uri={STATUS_URI} ")
        assert redis_client.publish(CHANNEL, NOTES_URI) >= 0  # not watched: nothing comes
        assert redis_client.publish(CHANNEL, STATUS_URI) >= 1
        updated = (await stream.next_message(BOUND)).message
        assert updated["method"] == UPDATED and updated["params"]["uri"] == STATUS_URI, updated


async def test_other_scenarios_acknowledge_every_uri_named(inproc) -> None:
    _, url = await inproc.server(update_delay_seconds="600", scenario="list-changed")
    both = [STATUS_URI, NOTES_URI]
    async with listen_stream(url, "full-1", resourceSubscriptions=both) as stream:
        ack = (await stream.next_message(BOUND)).message
    assert ack["params"]["notifications"]["resourceSubscriptions"] == both, ack
