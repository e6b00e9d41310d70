"""Take-over between running updaters: the jobs of a dead updater are applied by a
live one without any restart, and the jobs of a live updater are never taken.

The tests that SIGKILL an updater or tell two processes apart run real processes;
the others run updaters in the test's event loop (tests/support/inproc.py). Heartbeat and
take-over timings are shortened through their settings."""

from __future__ import annotations

import re
import time

import pytest

from mcp_lab import contract
from tests.support.lab import STATUS_URI, connect, version_of
from tests.support.takeover import CHECK, TAKE_OVER_EVERY, pending_by_consumer

pytestmark = pytest.mark.anyio

BOUND = 15.0


async def test_a_live_updaters_jobs_are_never_taken(inproc, redis_client) -> None:
    holder = await inproc.updater(updater_consumer="holder")
    # A job due in a day, for a session nobody holds: its updater keeps it pending.
    job = contract.UpdateJob(STATUS_URI, "nobody", delay=86400)
    entry_id = redis_client.xadd(contract.JOBS_STREAM, job.fields())
    await holder.await_line(rf"\[updater\] scheduled job={re.escape(entry_id)} ")

    other = await inproc.updater(
        updater_consumer="other", log_level="DEBUG", take_over_every_seconds=TAKE_OVER_EVERY
    )
    assert other.matching(CHECK.format(holders=1, dead=0))  # at its start
    ready = other.mark()
    await other.await_line(CHECK.format(holders=1, dead=0), since=ready)  # and a while later
    assert other.matching(r"took over|scheduled") == []
    assert pending_by_consumer(redis_client) == {"holder": 1}
    assert holder.matching(r"took over") == []


async def test_a_job_taken_over_before_it_is_due_keeps_its_due_time(inproc, redis_client) -> None:
    delay = 2.0
    _, url = await inproc.server(update_delay_seconds=str(delay))
    async with connect(url, "due-time") as client:
        await client.session.subscribe_resource(STATUS_URI)
        # An updater that read the job, never set a heartbeat and is gone.
        taken = redis_client.xreadgroup(
            contract.JOBS_GROUP, "ghost", {contract.JOBS_STREAM: ">"}, count=1
        )
        entry_id = taken[0][1][0][0]
        due = contract.entry_time_ms(entry_id) / 1000 + delay
        before_start = time.time()

        updater = await inproc.updater(update_delay_seconds=str(delay))
        assert updater.matching(r"took over 1 job\(s\) of consumer='ghost' \(no heartbeat")
        recovered = updater.matching(rf"scheduled job={re.escape(entry_id)} .*\(recovered\)")
        assert len(recovered) == 1
        wait = float(re.search(r" in=([\d.]+)s ", recovered[0]).group(1))
        assert wait <= due - before_start + 0.01  # counted from the subscribe, not the claim
        assert await client.wait_updated(1, timeout=delay + BOUND) == [STATUS_URI]
        assert time.time() >= due - 0.05
        assert version_of(await client.read_text()) == 2


async def test_take_over_is_done_in_batches_of_100(inproc, redis_client) -> None:
    for n in range(150):
        job = contract.UpdateJob(STATUS_URI, f"batch-{n}", delay=0)
        redis_client.xadd(contract.JOBS_STREAM, job.fields())
    redis_client.xgroup_create(contract.JOBS_STREAM, contract.JOBS_GROUP, id="0")
    redis_client.xreadgroup(contract.JOBS_GROUP, "ghost", {contract.JOBS_STREAM: ">"}, count=150)

    updater = await inproc.updater(take_over_every_seconds=TAKE_OVER_EVERY)
    assert updater.matching(r"took over 100 job\(s\) of consumer='ghost'")
    await updater.await_line(r"took over 50 job\(s\) of consumer='ghost'")
    for n in range(150):
        await updater.await_line(rf"\[resource/update\] .*scope=batch-{n} ")
    assert len(updater.matching(r"\[resource/update\]")) == 150
    assert redis_client.xlen(contract.JOBS_STREAM) == 0
    assert pending_by_consumer(redis_client) == {}


