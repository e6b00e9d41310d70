"""The updater: durable jobs, crash recovery, exactly-once application.

The SIGKILL test runs real processes; the others run the updater in the test's
event loop (tests/support/inproc.py)."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
import redis

from mcp_lab import contract, state, state_jobs
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.updater import applying
from tests.support.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

BOUND = 15.0


async def test_subscribe_while_no_updater_runs_is_applied_when_one_starts(inproc) -> None:
    _, url = await inproc.server(update_delay_seconds="0.2")
    async with connect(url, "early") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.session.send_ping()
        assert client.updated == []
        await inproc.updater(update_delay_seconds="0.2")
        assert await client.wait_updated(1, timeout=BOUND) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2


async def test_burst_mode_applies_the_queued_jobs_when_due_and_returns(
    inproc, redis_url, redis_client
) -> None:
    redis = state.connect(redis_url)
    try:
        await state_jobs.ensure_job_group(redis)
        for target, delay in (("burst-a", 0.3), ("burst-b", 0.6)):
            await state_jobs.enqueue_job(redis, contract.UpdateJob(STATUS_URI, target, delay=delay))
    finally:
        await redis.aclose()
    started = time.monotonic()
    updater = await inproc.apply_all(timeout=BOUND)  # returns: nothing left to wait for
    assert time.monotonic() - started >= 0.6 - 0.05  # the later job's delay was waited out
    assert updater.updater.applied == 2
    for target in ("burst-a", "burst-b"):
        assert redis_client.hget(contract.state_key(target, STATUS_URI), "version") == "2"
    assert redis_client.xlen(contract.JOBS_STREAM) == 0
    assert redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)["pending"] == 0
    assert updater.matching(r"\[updater\] burst done: 2 job\(s\) applied")


async def _claimed_jobs(redis, jobs: list[contract.UpdateJob]) -> list[str]:
    """``jobs`` on the stream, taken by a consumer (pending, as an updater holds them)."""
    await state_jobs.ensure_job_group(redis)
    ids = [await state_jobs.enqueue_job(redis, job) for job in jobs]
    claimed = await redis.xreadgroup(
        contract.JOBS_GROUP, "test", {contract.JOBS_STREAM: ">"}, count=len(jobs)
    )
    assert [entry for entry, _ in claimed[0][1]] == ids
    return ids


_APPLY = {
    "template": REVIEW_STATUS.updated_template("reviewed"),
    "channel": "test-channel",
    "ttl_seconds": 60,
}


async def test_apply_jobs_applies_a_job_only_once(redis_url, redis_client) -> None:
    redis = state.connect(redis_url)
    try:
        (entry_id,) = await _claimed_jobs(redis, [contract.UpdateJob(STATUS_URI, "s1")])
        pubsub = redis.pubsub()
        await pubsub.subscribe("test-channel")
        await pubsub.get_message(timeout=1)  # the subscribe confirmation

        job = state_jobs.DueJob(entry_id, ["s1"], 1700000000000)
        first = await state_jobs.apply_jobs(redis, STATUS_URI, [job], **_APPLY)
        second = await state_jobs.apply_jobs(redis, STATUS_URI, [job], **_APPLY)
        assert first == [[2]]
        assert second == [None]

        published = await pubsub.get_message(timeout=2)
        assert published is not None
        assert contract.parse_update_messages(published["data"], LAB_CATALOG) == [
            contract.UpdateMessage(STATUS_URI, "s1", 2, due_ms=1700000000000)
        ]
        assert await pubsub.get_message(timeout=0.2) is None
        await pubsub.aclose()

        version, text = await state.read_state(
            redis, "s1", STATUS_URI, REVIEW_STATUS.initial("pending")
        )
        assert version == 2
        assert text == REVIEW_STATUS.updated_template("reviewed").replace("{version}", "2")
        assert 0 < redis_client.ttl(contract.state_key("s1", STATUS_URI)) <= 60
        assert redis_client.xlen(contract.JOBS_STREAM) == 0
    finally:
        await redis.aclose()


async def test_a_job_queued_by_a_subscribe_leaves_a_session_that_left_alone(
    redis_url, redis_client
) -> None:
    """``while_subscribed``: the state of a session still in the URI's subscriber set
    is updated, that of one that left is not made again (acknowledged all the same)."""
    redis = state.connect(redis_url)
    try:
        jobs = [contract.UpdateJob(STATUS_URI, s, while_subscribed=True) for s in ("in", "out")]
        ids = await _claimed_jobs(redis, jobs)
        redis_client.sadd(contract.subscribers_key(STATUS_URI), "in")
        due = [
            state_jobs.DueJob(entry, [s], 1, True)
            for entry, s in zip(ids, ("in", "out"), strict=True)
        ]
        assert await state_jobs.apply_jobs(redis, STATUS_URI, due, **_APPLY) == [[2], [None]]
        assert redis_client.exists(contract.state_key("out", STATUS_URI)) == 0
        assert redis_client.hget(contract.state_key("in", STATUS_URI), "version") == "2"
        assert redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)["pending"] == 0
        # Applied (or skipped) once: a second try changes nothing.
        assert await state_jobs.apply_jobs(redis, STATUS_URI, due, **_APPLY) == [None, None]
    finally:
        await redis.aclose()


async def test_apply_jobs_names_many_sessions_per_message(redis_url, redis_client) -> None:
    """A batch: one script, the sessions' updates in messages of at most
    MAX_SESSIONS_PER_MESSAGE sessions each, a job applied before left alone, a job
    without subscribers only acknowledged, the shared state in a message of its own."""
    n = contract.MAX_SESSIONS_PER_MESSAGE + 50
    redis = state.connect(redis_url)
    try:
        jobs = [contract.UpdateJob(STATUS_URI, f"s{i}") for i in range(n)]
        jobs += [contract.UpdateJob(STATUS_URI, "*"), contract.UpdateJob(STATUS_URI, "shared")]
        ids = await _claimed_jobs(redis, jobs)
        redis_client.hset(contract.state_key("s7", STATUS_URI), mapping={"version": 4, "text": "x"})
        early = state_jobs.DueJob(ids[3], ["s3"], 1)
        assert await state_jobs.apply_jobs(redis, STATUS_URI, [early], **_APPLY) == [[2]]
        pubsub = redis.pubsub()
        await pubsub.subscribe("test-channel")
        await pubsub.get_message(timeout=1)

        due = [state_jobs.DueJob(entry, [f"s{i}"], 1000 + i) for i, entry in enumerate(ids[:n])]
        due += [state_jobs.DueJob(ids[n], [], 5), state_jobs.DueJob(ids[n + 1], ["shared"], 6)]
        applied = await state_jobs.apply_jobs(redis, STATUS_URI, due, **_APPLY)

        assert applied[3] is None  # applied before: not again
        assert applied[7] == [5]  # its state was at 4
        assert applied[n] == [] and applied[n + 1] == [2]
        assert all(v == [2] for i, v in enumerate(applied[:n]) if i not in (3, 7))
        told: list[contract.UpdateMessage] = []
        payloads = 0
        while (published := await pubsub.get_message(timeout=1)) is not None:
            payloads += 1
            told += contract.parse_update_messages(published["data"], LAB_CATALOG)
        await pubsub.aclose()
        assert payloads == 3  # 200 sessions, 49 sessions, the shared state
        assert len(told) == n  # n - 1 sessions and the shared state
        assert contract.UpdateMessage(STATUS_URI, "s7", 5, due_ms=1007) in told
        assert contract.UpdateMessage(STATUS_URI, None, 2, due_ms=6) in told
        assert not any(m.session == "s3" for m in told)
        assert redis_client.xlen(contract.JOBS_STREAM) == 0
        pending = redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
        assert pending["pending"] == 0
    finally:
        await redis.aclose()


async def test_jobs_due_together_are_published_together(inproc, redis_url) -> None:
    """300 sessions' jobs falling due at once reach the channel in a few messages
    naming many sessions each (one per job before: 300), every session once, each
    with the time it was due."""
    n = 300
    redis = state.connect(redis_url)
    pubsub = redis.pubsub()
    try:
        channel = "mcp:resources:updated"
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1)
        await state_jobs.ensure_job_group(redis)
        pipe = redis.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(contract.JOBS_STREAM, contract.UpdateJob(STATUS_URI, f"s{i}", 0.5).fields())
        ids = await pipe.execute()
        await inproc.updater(updates_channel=channel)
        told: list[contract.UpdateMessage] = []
        payloads = 0
        deadline = time.monotonic() + BOUND
        while len(told) < n and time.monotonic() < deadline:
            published = await pubsub.get_message(timeout=1)
            if published is not None:
                payloads += 1
                told += contract.parse_update_messages(published["data"], LAB_CATALOG)
        assert sorted(m.session or "" for m in told) == sorted(f"s{i}" for i in range(n))
        assert payloads <= 5, payloads
        due = {f"s{i}": contract.entry_time_ms(entry) + 500 for i, entry in enumerate(ids)}
        assert all(m.due_ms == due[m.session or ""] for m in told)
    finally:
        await pubsub.aclose()
        await redis.aclose()


async def test_bad_job_is_dropped_with_a_log_line(inproc, redis_client) -> None:
    updater = await inproc.updater()
    redis_client.xadd(contract.JOBS_STREAM, {"uri": "test://nope", "target": "*"})
    await updater.await_line(r"\[updater\] dropped bad job \S+: unknown uri")
    assert updater.running


# A dropped job's log line shows each field cut to 60 characters and the reason
# cut to 200; a line longer than this carries a payload.
LONGEST_LINE = 600


async def test_hostile_jobs_get_one_short_line_each_and_the_updater_keeps_working(
    inproc, redis_url
) -> None:
    _, url = await inproc.server(update_delay_seconds="0.3")
    raw = redis.Redis.from_url(redis_url)  # bytes in and out, as a hostile writer sends them
    try:
        # A job that is not UTF-8, taken by an updater that then died: the next
        # updater finds it pending and must drop it, not crash on it again and again.
        pending_id = raw.xadd(contract.JOBS_STREAM, {b"uri": b"\xff\xfe", b"target": b"*"})
        raw.xreadgroup(contract.JOBS_GROUP, "crashed", {contract.JOBS_STREAM: ">"})
        assert raw.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)["pending"] == 1
        updater = await inproc.updater(update_delay_seconds="0.3")
        recovered = re.escape(pending_id.decode())
        line = await updater.await_line(
            rf"\[updater\] dropped bad job {recovered}: field 'uri' is not UTF-8"
        )
        assert len(line) < LONGEST_LINE

        hostile: list[tuple[dict[bytes, bytes], str]] = [
            ({b"uri": b"y" * 5_000_000, b"target": b"*"}, r"entry of 5000010 bytes is over 65536"),
            (
                {b"uri": STATUS_URI.encode(), b"target": b"t" * 5_000_000},
                r"entry of \d+ bytes is over 65536",
            ),
            ({b"target": b"*"}, r"unknown uri ''"),
            ({b"\xff\xfe": bytes(range(256))}, r"field name b'\\xff\\xfe' is not UTF-8"),
            (
                {b"uri": STATUS_URI.encode(), b"target": b"*", b"delay": b"\x80" * 1000},
                r"field 'delay' is not UTF-8",
            ),
            ({b"uri": f"test://{'a' * 60_000}".encode()}, r"unknown uri 'test://aaa"),
        ]
        for fields, reason in hostile:
            entry_id = raw.xadd(contract.JOBS_STREAM, fields).decode()
            line = await updater.await_line(
                rf"\[updater\] dropped bad job {re.escape(entry_id)}: ", timeout=10
            )
            assert re.search(reason, line), line
            assert len(line) < LONGEST_LINE, f"{len(line)} characters: {line[:300]}"
        # Each line comes once its job is acknowledged and deleted: nothing is left
        # to be taken again.
        assert raw.xlen(contract.JOBS_STREAM) == 0
        assert raw.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)["pending"] == 0
    finally:
        raw.close()

    async with connect(url, "after-garbage") as client:
        await client.session.subscribe_resource(STATUS_URI)
        assert await client.wait_updated(1, timeout=BOUND) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2
    assert updater.running
    assert len(updater.matching(r"\[updater\] dropped bad job")) == 1 + len(hostile)
    assert updater.matching(r"Traceback|unexpected error|redis unavailable") == []
    assert max(len(line) for line in updater.lines) < LONGEST_LINE


def _due(target: str, at: int) -> applying._Due:
    job = contract.UpdateJob(uri=STATUS_URI, target=target)
    return applying._Due(f"{at}-0", job, float(at), asyncio.Future())


async def test_a_batch_takes_one_job_of_each_session_in_turn() -> None:
    """3,000 jobs of one session due before a victim's one: the victim's is in the first
    batch, and each part keeps the order the jobs fell due in."""
    due = [_due("flooder", at) for at in range(3000)] + [_due("victim", 3000)]
    batch, rest = applying.fair_batch(due, 500)
    assert [d.job.target for d in batch].count("victim") == 1
    assert len(batch) == 500 and len(rest) == 2501
    assert [d.due for d in batch] == sorted(d.due for d in batch)
    assert [d.due for d in rest] == sorted(d.due for d in rest)
    assert applying.fair_batch(due[:10], 500) == (due[:10], [])
