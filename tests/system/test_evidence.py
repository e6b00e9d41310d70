"""The evidence record and `mcp-lab report`, against real processes and real clients."""

from __future__ import annotations

import json
import urllib.request

import anyio
import pytest
import redis

from services import contract
from tests.support.lab import RawSession, amcp_lab, connect, lab_env

pytestmark = pytest.mark.anyio

DELAY = "0.5"
BOUND = 10.0


async def report(redis_url: str, *args: str) -> str:
    result = await amcp_lab(lab_env(redis_url), "report", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def reset(redis_url: str) -> None:
    result = await amcp_lab(lab_env(redis_url), "reset")
    assert result.returncode == 0, result.stderr


def client_entry(data: dict, name: str) -> dict:
    matches = [c for c in data["clients"] if c["client"] == name]
    assert len(matches) == 1, data["clients"]
    return matches[0]


async def test_every_inbound_message_is_recorded_with_its_error(lab, redis_url) -> None:
    _, url = await lab.aserver()
    raw = RawSession(url, "odd-client")
    try:
        await raw.initialize()
        unknown = await raw.request("no/such/method")
        assert unknown["error"]["code"] == -32601
        missing = await raw.request("resources/read", {"uri": "test://missing"})
        assert missing["error"]["code"] == -32002
    finally:
        await raw.close()
    entry = client_entry(json.loads(await report(redis_url, "--format", "json")), "odd-client")
    events = [(e["method"], e["error"]) for e in entry["sessions"][0]["events"]]
    assert events == [
        ("initialize", None),
        ("notifications/initialized", None),
        ("no/such/method", -32601),
        ("resources/read", -32002),
    ]
    assert entry["level"] == 1


async def test_reset_starts_a_new_run_and_old_runs_stay_readable(lab, redis_url) -> None:
    _, url = await lab.aserver()
    async with connect(url, "before-reset") as client:
        await client.read_text()
    await reset(redis_url)
    async with connect(url, "after-reset") as client:
        await client.session.list_resources()
    data = json.loads(await report(redis_url, "--format", "json"))
    assert [c["client"] for c in data["clients"]] == ["after-reset"]
    assert data["run"]["id"] != "0-0" and data["run"]["started"]
    everything = json.loads(await report(redis_url, "--format", "json", "--run", "0-0"))
    assert [c["client"] for c in everything["clients"]] == ["before-reset"]
    recent = json.loads(await report(redis_url, "--format", "json", "--since", "1h"))
    assert {c["client"] for c in recent["clients"]} == {"before-reset", "after-reset"}
    # each header says what it covers: the run, everything before a reset, or the --since window
    assert recent["run"] is None and recent["since"].endswith("Z")
    assert (await report(redis_url)).startswith(f"run {data['run']['id']}, started 20")
    assert (await report(redis_url, "--run", "0-0")).startswith(
        "run 0-0, from the first event recorded"
    )
    assert (await report(redis_url, "--since", "1h")).startswith(
        f"events since {recent['since'][:10]} "
    )
    since_md = await report(redis_url, "--since", "1h", "--format", "markdown")
    assert since_md.startswith("<!-- mcp-subscribe-lab events since ") and "0-0" not in since_md


# Entries anyone with redis-cli could add to the lab's own streams; none is evidence.
GARBAGE_EVENTS: list[dict[bytes, bytes]] = [
    {b"ts": b"\xff\xfe", b"session": b"s", b"client": b"c"},  # not UTF-8
    {b"\x80" * 5000: b"x"},  # a field name that is not UTF-8, and long
    {b"hello": b"world"},  # no event at all
    {b"ts": b"9" * 30, b"session": b"x", b"client": b"y", b"client_version": b"1",
     b"protocol": b"p", b"transport": b"t", b"direction": b"in", b"method": b"initialize"},
    {b"ts": b"1", b"session": b"x", b"client": b"y", b"client_version": b"1",
     b"protocol": b"p", b"transport": b"t", b"direction": b"sideways", b"method": b"initialize"},
    {b"version": b"\xc3" * 2_000_000},  # megabytes, cut UTF-8
]  # fmt: skip


def write_garbage(redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url)  # bytes in, as a hostile writer sends them
    try:
        for fields in GARBAGE_EVENTS:
            raw.xadd(contract.EVENTS_STREAM, fields)
        raw.xadd(contract.RUNS_STREAM, {b"\xff": b"\xfe"})  # a run start, with garbage
    finally:
        raw.close()


async def test_garbage_in_the_record_is_left_out_of_report_and_dashboard(lab, redis_url) -> None:
    server, url = await lab.aserver()
    async with connect(url, "before-garbage") as client:
        await client.read_text()
    write_garbage(redis_url)
    async with connect(url, "after-garbage") as client:
        await client.read_text()
    await server.await_line(r"\[session/end\] .*client=after-garbage/")

    # The garbage run start began a run: the garbage events are in the one before.
    for fmt in ("json", "markdown", "table"):
        result = await amcp_lab(lab_env(redis_url), "report", "--format", fmt, "--run", "0-0")
        assert result.returncode == 0, result.stderr
        assert "before-garbage" in result.stdout and "after-garbage" not in result.stdout
        which, warning = result.stderr.strip().split("\n")
        assert which.startswith("mcp-lab: Redis at ") and "(REDIS_URL)" in which, which
        assert warning.startswith(
            f"[evidence] left out {len(GARBAGE_EVENTS)} malformed entries of mcp:events; first "
        ), warning
        assert "field 'ts' is not UTF-8" in warning and len(warning) < 800, warning
    result = await amcp_lab(lab_env(redis_url), "report", "--format", "json")
    assert result.returncode == 0 and "left out" not in result.stderr, result.stderr
    assert [c["client"] for c in json.loads(result.stdout)["clients"]] == ["after-garbage"]

    base = url.removesuffix("/mcp")
    with urllib.request.urlopen(f"{base}/api/report", timeout=BOUND) as reply:
        assert [c["client"] for c in json.load(reply)["clients"]] == ["after-garbage"]
    first = await anyio.to_thread.run_sync(lambda: first_stream_report(f"{base}/api/stream"))
    assert [c["client"] for c in first["clients"]] == ["after-garbage"]
    assert server.matching(r"Traceback|Exception") == [], "\n".join(server.lines)


def first_stream_report(url: str) -> dict:
    """The first report the dashboard's event stream sends."""
    with urllib.request.urlopen(url, timeout=BOUND) as stream:
        for raw in stream:
            line = raw.decode()
            if line.startswith("data: "):
                return json.loads(line[6:])
    raise AssertionError("the stream ended before a report")


