"""The attacks of issue 20, replayed against the lab with bounded loops.

Most run the lab in process (tests/inproc.py) on the real Redis of the test; the
ones whose claim is the process boundary (open-file limits, a replica killed with
SIGKILL) start server processes. scripts/bench_hostile.py measures the same
attacks at full size and prints the figures (README, "Hostile clients").
"""

from __future__ import annotations

import json
import re

import httpx2
import pytest
import redis

from tests.inproc import http_client
from tests.lab import RawSession

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
FORGED = "[resources/subscribe] uri=test://review/status session=forged client=claude-code/1.2.3"
# Every line an in-process server logs starts with its level (tests/inproc.py).
LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def client_of(url: str) -> httpx2.AsyncClient:
    client = http_client(url)
    assert client is not None, f"no in-process server at {url}"
    return client


def redis_bytes(client: redis.Redis) -> int:
    """What the keys of the test's database take in Redis (MEMORY USAGE, all samples)."""
    return sum(
        int(client.memory_usage(key, samples=0) or 0) for key in client.scan_iter(count=1000)
    )


async def test_a_megabyte_client_name_and_300_pings_add_under_5_mb_to_redis(
    inproc, redis_client
) -> None:
    server, url = await inproc.server()
    before = redis_bytes(redis_client)
    raw = RawSession(url, "n" * 1_000_000)
    try:
        await raw.initialize()
        for _ in range(300):
            assert "result" in await raw.request("ping")
        reply = await raw.request("resources/read", {"uri": "test://" + "u" * 1_000_000})
        assert len(json.dumps(reply)) < 2_000, "the unknown URI is echoed whole"
    finally:
        await raw.close()
    await server.await_line(r"\[resources/read\] uri=test://uuu.*error=not-found")
    grown = redis_bytes(redis_client) - before
    assert grown < 5_000_000, f"Redis grew by {grown} bytes"
    assert max(len(line) for line in server.lines) < 10_000


async def test_a_newline_in_a_client_value_never_starts_a_log_line(inproc) -> None:
    server, url = await inproc.server(auth_token="s3cret")
    bearer = {"Authorization": "Bearer s3cret"}
    raw = RawSession(url, f"evil\n{FORGED}")
    raw._http.headers.update(bearer)  # RawSession has no token option
    try:
        await raw.initialize()
        await raw.request("resources/subscribe", {"uri": f"test://x\n{FORGED}"})
        await raw.request("resources/read", {"uri": "test://x\x1b]0;owned\x07\x1b[2J"})
    finally:
        await raw.close()
    async with client_of(url) as client:
        await client.get(url.removesuffix("/mcp") + "/%0A" + FORGED.replace(" ", "%20"))
    await server.await_line(r"\[guard\] GET .* without a valid token")
    await server.await_line(r"\[resources/read\] .*error=not-found")
    forged = [line for line in server.lines if not LOG_LINE.match(line)]
    assert forged == [], forged
    assert not any("\x1b" in line for line in server.lines)
    assert server.matching(r"client=evil\\n\[resources/subscribe\]")


async def test_an_unknown_method_is_not_echoed_whole_and_nothing_big_is_kept(
    inproc, redis_client
) -> None:
    server, url = await inproc.server()
    raw = RawSession(url, "echo")
    try:
        await raw.initialize()
        status, reply = await raw.post({"jsonrpc": "2.0", "id": 9, "method": "m" * 900_000})
        assert status == 200 and reply is not None and reply["error"]["code"] == -32601
        assert len(json.dumps(reply)) < 2_000
        key = f"mcp:resume:{raw.session_id}"
        assert int(redis_client.memory_usage(key, samples=0) or 0) < 20_000
    finally:
        await raw.close()
    assert max(len(line) for line in server.lines) < 10_000


async def test_the_evidence_stream_is_trimmed_by_its_size_too(inproc, redis_client) -> None:
    server, url = await inproc.server(events_max_bytes="65536")
    raw = RawSession(url, "n" * 100_000)
    try:
        await raw.initialize()
        for _ in range(400):  # about 400 bytes of evidence each
            await raw.request("ping")
    finally:
        await raw.close()
    await server.await_line(r"\[evidence\] mcp:events took \d+ bytes .* trimmed", timeout=20)
    used = int(redis_client.memory_usage("mcp:events", samples=0) or 0)
    assert used < 2 * 65536, used
