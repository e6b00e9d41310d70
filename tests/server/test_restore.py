"""The server gives a Redis that came back without its data the subscriptions it
holds (services/mcp_lab/server/restore.py; issue 44, item 4). In the test's event
loop (tests/support/inproc.py); tests/system/test_redis_empty.py restarts a real
redis-server empty under real processes."""

from __future__ import annotations

import pytest

from mcp_lab import contract
from mcp_lab.evidence.restarts import RESTORED
from tests.support.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

BOUND = 15.0
RESTORED_LINE = r"\[lab\] the store \(Redis\) came back without its data"


async def test_a_session_told_of_its_update_keeps_it_and_gets_no_second_one(
    inproc, redis_client
) -> None:
    """Its update was applied and notified before the data was lost: its state is
    written again at version 2 (not read as 1), and no job is queued again."""
    server, url = await inproc.server(update_delay_seconds="0.3")
    await inproc.updater(update_delay_seconds="0.3")
    async with connect(url, "told-before") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=BOUND)
        assert version_of(await client.read_text()) == 2
        (session,) = redis_client.smembers(contract.subscribers_key(STATUS_URI))
        mark = server.mark()

        redis_client.flushdb()  # what a Redis restarted without its data holds
        assert redis_client.client_kill_filter(_type="pubsub") >= 1  # the relay reconnects
        line = await server.await_line(RESTORED_LINE, BOUND, mark)

        assert "restored 1 subscription(s) of 1 session(s): 0 update job(s) queued " in line
        assert "1 state(s) written again" in line
        assert version_of(await client.read_text()) == 2
        assert redis_client.smembers(contract.subscribers_key(STATUS_URI)) == {session}
        assert redis_client.xlen(contract.JOBS_STREAM) == 0
        assert redis_client.get(contract.STORE_EPOCH_KEY)
        restored = [
            fields
            for _, fields in redis_client.xrange(contract.EVENTS_STREAM)
            if fields["method"] == RESTORED
        ]
        assert [(f["session"], f["uri"], f["version"]) for f in restored] == [
            (session, STATUS_URI, "2")
        ]
        # Subscribed as far as Redis knows: an update of every subscriber reaches it.
        job = contract.UpdateJob(STATUS_URI, contract.ALL_SUBSCRIBERS, delay=0)
        redis_client.xadd(contract.JOBS_STREAM, job.fields())
        await client.wait_updated(2, timeout=BOUND)
        assert version_of(await client.read_text()) == 3


async def test_a_reconnect_to_the_same_data_restores_nothing(inproc, redis_client) -> None:
    server, url = await inproc.server(update_delay_seconds="60")
    async with connect(url, "same-data") as client:
        await client.session.subscribe_resource(STATUS_URI)
        mark = server.mark()
        assert redis_client.client_kill_filter(_type="pubsub") >= 1
        await server.await_line(r"\[relay\] reconcile checked=1 ", BOUND, mark)
        assert not server.matching(RESTORED_LINE, mark)
        assert redis_client.xlen(contract.JOBS_STREAM) == 1  # its one job, not two


async def test_jobs_not_due_yet_are_queued_again_due_when_they_were(inproc, redis_client) -> None:
    """Shared scope: each subscribe's update of the shared state comes back, due at its
    subscribe time plus the delay (not the delay again from now)."""
    server, url = await inproc.server(update_delay_seconds="60", state_scope="shared")
    async with connect(url, "shared-a") as a, connect(url, "shared-b") as b:
        for client in (a, b):
            await client.session.subscribe_resource(STATUS_URI)
        mark = server.mark()
        redis_client.flushdb()
        assert redis_client.client_kill_filter(_type="pubsub") >= 1
        line = await server.await_line(RESTORED_LINE, BOUND, mark)
        assert "restored 2 subscription(s) of 2 session(s): 2 update job(s) queued " in line
        jobs = [fields for _, fields in redis_client.xrange(contract.JOBS_STREAM)]
        assert [job["target"] for job in jobs] == [contract.SHARED_SCOPE] * 2
        assert all(30 < float(job["delay"]) < 60 for job in jobs), jobs
        assert redis_client.get(contract.STATE_SCOPE_KEY) == contract.SHARED_SCOPE
