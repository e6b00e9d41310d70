"""Updater processes: killed during the delay, its job taken over by a running one, two
under one consumer name, and the burst command."""

from __future__ import annotations

import re
import time

import pytest

from mcp_lab import contract
from tests.support.lab import STATUS_URI, amcp_lab, connect, lab_env, version_of
from tests.support.takeover import CHECK, HEARTBEAT, TAKE_OVER_EVERY, pending_by_consumer

pytestmark = pytest.mark.anyio

BOUND = 15.0



async def test_updater_killed_during_the_delay_still_delivers_once(lab, redis_client) -> None:
    server, url = await lab.aserver(update_delay_seconds="2")
    updater = await lab.aupdater(update_delay_seconds="2")
    async with connect(url, "survivor") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await updater.await_line(r"\[updater\] scheduled job=")
        updater.kill()  # SIGKILL while the job waits out its delay
        assert redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)["pending"] == 1

        again = await lab.aupdater(update_delay_seconds="2")
        # Its own name's leftovers, although the killed one's heartbeat has not expired.
        assert again.matching(
            r"\[updater\] took over 1 job\(s\) of consumer='updater' "
            r"\(left pending by an earlier updater of this name\)"
        )
        await again.await_line(r"\[updater\] scheduled job=\S+ .*\(recovered\)")
        assert await client.wait_updated(1, timeout=BOUND) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2

        await again.await_line(r"\[resource/update\] .*version=2")
        await client.session.send_ping()
        assert client.updated == [STATUS_URI]
        assert len(again.matching(r"\[resource/update\]")) == 1
        assert len(server.matching(r"\[notification/send\]")) == 1
        assert redis_client.xlen(contract.JOBS_STREAM) == 0
        pending = redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
        assert pending["pending"] == 0


@pytest.mark.process
async def test_updater_burst_command_applies_the_queued_job_and_exits(redis_url, redis_client):
    env = lab_env(redis_url, update_delay_seconds="0.2")
    redis_client.sadd(contract.subscribers_key(STATUS_URI), "burst-cli")  # a known session
    assert (await amcp_lab(env, "trigger", "--session", "burst-cli", "--no-wait")).returncode == 0
    result = await amcp_lab(env, "updater", "--burst")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "burst done: 1 job(s) applied" in result.stdout + result.stderr
    assert redis_client.hget(contract.state_key("burst-cli", STATUS_URI), "version") == "2"


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


async def test_two_updaters_under_one_consumer_name_say_so(lab) -> None:
    first = await lab.aupdater(updater_consumer="twin", **FAST)
    second = await lab.aupdater(updater_consumer="twin", **FAST)
    told = r"\[updater\] another updater \('[^']*:{pid}'\) also runs as consumer=twin: give each"
    await first.await_line(told.format(pid=second.process.pid))
    await second.await_line(told.format(pid=first.process.pid))
    assert len(first.matching(r"another updater")) == 1  # once, not at every heartbeat


FAST = {"updater_heartbeat_seconds": HEARTBEAT, "take_over_every_seconds": TAKE_OVER_EVERY}


TAKE_OVER_BOUND = float(HEARTBEAT) + float(TAKE_OVER_EVERY) + BOUND
