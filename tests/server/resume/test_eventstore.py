"""The resume event store's bulk path (a fan-out) against a real Redis."""

from __future__ import annotations

import pytest
from mcp.server.streamable_http import GET_STREAM_KEY
from mcp_types import JSONRPCNotification

from mcp_lab import contract, state
from mcp_lab.process.writer import BatchWriter
from mcp_lab.server.resume.eventstore import RedisEventStore, store_events

pytestmark = pytest.mark.anyio


async def _nothing_replayed(session: str, message: object) -> None:
    return None


async def test_one_bad_key_costs_only_its_own_session(redis_url) -> None:
    """A session whose resume key holds something else gets no id; the sessions
    before and after it in the same script call are kept with theirs."""
    redis = state.connect(redis_url)
    writer = BatchWriter(redis)
    writer.start()
    sessions = [f"bulk-{n}" for n in range(5)]
    await redis.delete(*(contract.resume_key(s) for s in sessions))
    await redis.set(contract.resume_key("bulk-2"), "not a stream")
    stores = [
        RedisEventStore(
            redis,
            s,
            "replica-a",
            max_events=10,
            ttl_seconds=60,
            on_replayed=_nothing_replayed,
            writer=writer,
        )
        for s in sessions
    ]
    message = JSONRPCNotification(
        jsonrpc="2.0", method="notifications/resources/updated", params={"uri": "test://x"}
    )
    try:
        ids = await store_events([(store, GET_STREAM_KEY, message) for store in stores])
        assert ids[2] == ""
        assert all(ids[i] for i in (0, 1, 3, 4)), ids
        for i in (0, 1, 3, 4):
            kept = await redis.xrange(contract.resume_key(sessions[i]))
            # The id a client sees is the entry's id and its random tag.
            assert [f"{entry_id}_{fields['tag']}" for entry_id, fields in kept] == [ids[i]]
            assert await redis.get(contract.session_owner_key(sessions[i])) == "replica-a"
    finally:
        await writer.close()
        await redis.aclose()
