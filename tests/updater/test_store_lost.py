"""A job the updater held when Redis lost its data is lost, never "already applied"
(issue 44, item 4); a job another updater applied still is. The updater runs in the
test's event loop (tests/support/inproc.py)."""

from __future__ import annotations

import pytest

from mcp_lab import contract, state, state_jobs
from tests.support.lab import STATUS_URI

pytestmark = pytest.mark.anyio

BOUND = 15.0


async def _queue(redis_url: str, target: str, delay: float) -> str:
    redis = state.connect(redis_url)
    try:
        await state_jobs.ensure_job_group(redis)
        return await state_jobs.enqueue_job(redis, contract.UpdateJob(STATUS_URI, target, delay))
    finally:
        await redis.aclose()


async def test_a_job_held_when_redis_lost_its_data_is_lost_not_already_applied(
    inproc, redis_url, redis_client
) -> None:
    updater = await inproc.updater()
    epoch = redis_client.get(contract.STORE_EPOCH_KEY)
    assert epoch, "the updater set no store epoch"
    entry_id = await _queue(redis_url, "held-then-lost", delay=1.5)
    await updater.await_line(rf"\[updater\] scheduled job={entry_id} ", BOUND)
    mark = updater.mark()
    redis_client.flushdb()  # what a Redis restarted without its data holds

    line = await updater.await_line(rf"job={entry_id} was lost with the store", BOUND, mark)
    assert "not applied" in line
    assert not updater.matching("already applied", mark)
    assert redis_client.get(contract.STORE_EPOCH_KEY) not in (None, epoch)
    assert redis_client.hget(contract.state_key("held-then-lost", STATUS_URI), "version") is None


async def test_a_job_another_updater_applied_is_still_already_applied(
    inproc, redis_url, redis_client
) -> None:
    updater = await inproc.updater()
    entry_id = await _queue(redis_url, "applied-elsewhere", delay=1.0)
    await updater.await_line(rf"\[updater\] scheduled job={entry_id} ", BOUND)
    mark = updater.mark()
    # As the apply script of another updater holding it would: acknowledged and deleted.
    redis_client.xack(contract.JOBS_STREAM, contract.JOBS_GROUP, entry_id)
    redis_client.xdel(contract.JOBS_STREAM, entry_id)

    await updater.await_line(rf"job={entry_id} was already applied; skipped", BOUND, mark)
    assert not updater.matching("lost with the store", mark)
