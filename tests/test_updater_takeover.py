"""Take-over between running updaters: the jobs of a dead updater are applied by a
live one without any restart, and the jobs of a live updater are never taken.

The tests that SIGKILL an updater or tell two processes apart run real processes;
the others run updaters in the test's event loop (tests/inproc.py). Heartbeat and
take-over timings are shortened through their settings."""

from __future__ import annotations

import re
import time

import pytest

from services import contract
from tests.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

BOUND = 15.0
# Shortened: a killed updater's heartbeat expires at most HEARTBEAT s after its last
# refresh; the survivor looks for stranded jobs every TAKE_OVER_EVERY s (and reads
# new jobs for no longer than that in between).
HEARTBEAT = "2"
TAKE_OVER_EVERY = "0.5"
FAST = {"updater_heartbeat_seconds": HEARTBEAT, "take_over_every_seconds": TAKE_OVER_EVERY}
TAKE_OVER_BOUND = float(HEARTBEAT) + float(TAKE_OVER_EVERY) + BOUND
CHECK = r"\[updater\] take-over check: {holders} other consumer\(s\) with pending jobs, {dead} "


def pending_by_consumer(redis_client) -> dict[str, int]:
    summary = redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
    return {c["name"]: c["pending"] for c in summary["consumers"]}


async def test_a_killed_updaters_job_is_applied_once_by_a_running_updater(
    lab, redis_client
) -> None:
    delay = 3.0
    server, url = await lab.aserver(update_delay_seconds=str(delay))
    doomed = await lab.aupdater(update_delay_seconds=str(delay), updater_consumer="doomed", **FAST)
    async with connect(url, "takeover") as client:
        await client.session.subscribe_resource(STATUS_URI)
        scheduled = await doomed.await_line(r"\[updater\] scheduled job=")
        entry_id = re.search(r"job=(\S+)", scheduled).group(1)

        survivor = await lab.aupdater(
            update_delay_seconds=str(delay), updater_consumer="survivor", log_level="DEBUG", **FAST
        )
        # At its start the survivor saw the job and left it: its holder was alive.
        assert survivor.matching(CHECK.format(holders=1, dead=0))
        assert survivor.matching(r"took over|scheduled") == []
        due = contract.entry_time_ms(entry_id) / 1000 + delay
        killed_at = time.time()
        doomed.kill()  # SIGKILL during the delay, while the survivor keeps running
        assert pending_by_consumer(redis_client) == {"doomed": 1}

        took = await survivor.await_line(r"\[updater\] took over", timeout=TAKE_OVER_BOUND)
        assert "took over 1 job(s) of consumer='doomed' (no heartbeat" in took
        recovered = await survivor.await_line(r"\[updater\] scheduled job=")
        assert f"job={entry_id} " in recovered and recovered.endswith("(recovered)")
        wait = float(re.search(r" in=([\d.]+)s ", recovered).group(1))
        assert wait <= max(0.0, due - killed_at) + 0.01  # due as it always was
        assert await client.wait_updated(1, timeout=BOUND) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2

        await survivor.await_line(rf"\[resource/update\] .*version=2 .*job={entry_id} ")
        await client.session.send_ping()
        assert client.updated == [STATUS_URI]
    assert len(survivor.matching(r"\[resource/update\]")) == 1
    assert doomed.matching(r"\[resource/update\]") == []
    assert len(server.matching(r"\[notification/send\]")) == 1
    assert redis_client.xlen(contract.JOBS_STREAM) == 0
    assert pending_by_consumer(redis_client) == {}
    assert survivor.process.poll() is None
    assert survivor.matching(r"Traceback|unexpected error") == []


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


async def test_two_updaters_under_one_consumer_name_say_so(lab) -> None:
    first = await lab.aupdater(updater_consumer="twin", **FAST)
    second = await lab.aupdater(updater_consumer="twin", **FAST)
    told = r"\[updater\] another updater \('[^']*:{pid}'\) also runs as consumer=twin: give each"
    await first.await_line(told.format(pid=second.process.pid))
    await second.await_line(told.format(pid=first.process.pid))
    assert len(first.matching(r"another updater")) == 1  # once, not at every heartbeat
