"""Garbage in the lab's state keys (anyone with redis-cli can write it): reads still
answer, with a warning, and the next update replaces the garbage with a clean state."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import redis

from mcp_lab import contract
from mcp_lab.catalog import REVIEW_STATUS
from tests.support.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

BOUND = 15.0
DELAY = "0.2"
KEY = contract.state_key(contract.SHARED_SCOPE, STATUS_URI)
INITIAL = REVIEW_STATUS.initial("pending")
NOT_THE_LABS = r"\[lab\] state mcp:state:shared:test://review/status is not the lab's \({}"


def hash_of(**fields: bytes) -> Callable[[redis.Redis], object]:
    return lambda raw: raw.hset(KEY, mapping=fields)


# (what is written, the version a read sees, the warning it logs)
CASES = {
    "version not UTF-8": (
        hash_of(version=b"\xff\xfe", text=b"status: pending"),
        1,
        NOT_THE_LABS.format(r"version b'\\xff\\xfe' is not a positive integer"),
    ),
    "version not a number": (
        hash_of(version=b"two", text=b"status: pending"),
        1,
        NOT_THE_LABS.format("version 'two' is not a positive integer"),
    ),
    "version 0": (
        hash_of(version=b"0", text=b"x"),
        1,
        NOT_THE_LABS.format("version '0' is not"),
    ),
    "version of 30 digits": (
        hash_of(version=b"9" * 30, text=b"x"),
        1,
        NOT_THE_LABS.format("version '9{30}' is not a positive integer of 13 digits at most"),
    ),
    "no text": (hash_of(version=b"4"), 1, NOT_THE_LABS.format("it has no text")),
    "not a hash": (
        lambda raw: raw.set(KEY, b"\x00\xff garbage"),
        1,
        NOT_THE_LABS.format("it is not a hash"),
    ),
    "text not UTF-8": (
        hash_of(version=b"5", text=b"status: \xff\xfe\nversion: 5"),
        5,
        r"\[lab\] state mcp:state:shared:test://review/status: text b'status: \\xff\\xfe.*' "
        r"is not UTF-8; served with U\+FFFD",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_garbage_state_is_read_and_then_replaced_by_the_update(
    case, inproc, redis_url, redis_client
) -> None:
    write, seen_version, warning = CASES[case]
    server, url = await inproc.server(update_delay_seconds=DELAY, state_scope="shared")
    updater = await inproc.updater(update_delay_seconds=DELAY, state_scope="shared")
    raw = redis.Redis.from_url(redis_url)
    try:
        write(raw)
    finally:
        raw.close()

    async with connect(url, f"garbage-{case.replace(' ', '-')}") as client:
        text = await client.read_text()  # an answer, not a JSON-RPC error
        if seen_version == 1:
            assert text == INITIAL
        else:
            assert version_of(text) == seen_version and "\ufffd" in text
        line = await server.await_line(warning)
        assert len(line) < 400, line

        await client.session.subscribe_resource(STATUS_URI)
        assert await client.wait_updated(1, timeout=BOUND) == [STATUS_URI]
        updated = await client.read_text()
        assert version_of(updated) == seen_version + 1
        assert "status: reviewed" in updated
    assert redis_client.hgetall(KEY) == {"version": str(seen_version + 1), "text": updated}
    assert server.matching(r"Traceback|Internal error|unavailable") == []
    assert updater.matching(r"Traceback|failed|not applied yet") == []


async def test_garbage_subscribers_do_not_stop_the_update(inproc, redis_url, redis_client) -> None:
    _, url = await inproc.server(update_delay_seconds=DELAY)
    updater = await inproc.updater(update_delay_seconds=DELAY)
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.sadd(contract.subscribers_key(STATUS_URI), b"\xff\xfe", b"\x80" * 1000)
    finally:
        raw.close()
    async with connect(url, "garbage-subscribers") as client:
        await client.session.subscribe_resource(STATUS_URI)
        # A job for every subscribed session: the garbage members are left out.
        job = contract.UpdateJob(STATUS_URI, contract.ALL_SUBSCRIBERS, delay=0)
        redis_client.xadd(contract.JOBS_STREAM, job.fields())
        assert await client.wait_updated(2, timeout=BOUND) == [STATUS_URI, STATUS_URI]
        assert version_of(await client.read_text()) == 3
    line = await updater.await_line(r"\[updater\] mcp:subscribers:\S+: left out 2 member\(s\)")
    assert re.search(r"that are not UTF-8, first b'\\x", line) and len(line) < 400
    assert updater.matching(r"Traceback|failed|not applied yet") == []
