"""Hostile clients against server processes: slow connections at a small open-file
limit, and a server killed under its sessions."""

from __future__ import annotations

import json
import sys
import time

import anyio
import httpx2
import pytest

from mcp_lab.process.embedded_redis import free_port
from tests.support.http_calls import healthz
from tests.support.lab import LabProcess, amcp_lab, lab_env
from tests.support.sse import get_headers, get_stream, subscribed_raw

pytestmark = pytest.mark.anyio



@pytest.mark.process
async def test_300_slow_connections_at_a_256_file_limit_leave_the_server_answering(
    redis_url,
) -> None:
    """Connections that never finish their request head are closed after
    MCP_TEST_HEAD_TIMEOUT_SECONDS, or sooner when a new connection needs their place
    under the connection cap; the cap stays under the open-file limit, so accept
    never fails; the log stays short."""
    port = free_port()
    env = lab_env(redis_url, port=str(port), head_timeout_seconds="3")
    limited = (
        "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
        "os.execv(sys.executable, [sys.executable, '-m', 'mcp_lab', 'server'])"
    )
    server = LabProcess(f"server:{port}", [sys.executable, "-c", limited], env)
    try:
        await server.await_line(r"\[lab\] server ready", timeout=30)
        start = server.mark()
        stop = anyio.Event()
        closed: list[bool] = []
        started = SlowStarts(300)
        async with anyio.create_task_group() as slow:
            for _ in range(300):
                slow.start_soon(slow_head, port, stop, closed, started)
            with anyio.fail_after(30):
                await started.all.wait()  # all 300 connected (or refused) and sending
            answered = 0
            for _ in range(5):
                with anyio.move_on_after(3):
                    answered += await healthz(port)
            stop.set()
        assert answered == 5, f"/healthz answered {answered} of 5 beside 300 slow connections"
        assert sum(closed) >= 100, f"only {sum(closed)} slow connections were closed"
        lines = server.lines[start:]
        assert len(lines) < 100, lines[:20]
        assert not any("Traceback" in line for line in lines), lines[:20]
        await server.await_line(r"\[lab\] connections: .*closed", since=start, timeout=5)
        # A connection that says nothing is closed at the head deadline (3 s here).
        async with await anyio.connect_tcp("127.0.0.1", port) as silent:
            with anyio.fail_after(6):
                try:
                    said = await silent.receive()
                except anyio.EndOfStream:
                    said = b""
            assert said == b"", said
    finally:
        await anyio.to_thread.run_sync(server.stop)


@pytest.mark.process
async def test_a_session_whose_server_died_is_404_at_once_and_marked_in_the_report(
    lab, redis_client
) -> None:
    """A server killed with SIGKILL: resuming one of its sessions elsewhere answers 404
    at once (its heartbeat is still there for seconds), and once its heartbeat is gone
    the evidence says the session died with its server, naming the update it never got."""
    owner, owner_url = await lab.aserver(update_delay_seconds="0.2", replica_heartbeat_seconds="2")
    other, other_url = await lab.aserver(replica_heartbeat_seconds="2")
    await lab.aupdater(update_delay_seconds="0.2")
    raw = await subscribed_raw(owner_url, "orphan")
    try:
        async with get_stream(owner_url, raw.session_id) as stream:
            priming = await stream.next()
        await owner.await_line(r"\[stream/close\] .*client=orphan/")
        # The update is applied and published while no GET stream is open: not delivered.
        await owner.await_line(r"\[notification/send\] .*client=orphan/.*delivered=no")
        await anyio.to_thread.run_sync(owner.kill)
        started = time.monotonic()
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.get(other_url, headers=get_headers(raw.session_id, priming.id))
        assert response.status_code == 404, response.status_code
        assert time.monotonic() - started < 2
        await other.await_line(r"\[lab\] replica \w+ is gone", timeout=30)
    finally:
        await raw.close()
    ended = [
        fields
        for _, fields in redis_client.xrange("mcp:events")
        if fields["session"] == raw.session_id and fields["method"] == "session/end"
    ]
    assert len(ended) == 1, ended
    assert ended[0]["reason"] == "replica-gone" and ended[0]["version"] == "2", ended[0]
    # The report puts the session/end in the orphan's timeline (its client is known there).
    result = await amcp_lab(lab_env(lab.redis_url), "report", "--format", "json")
    (orphan,) = [c for c in json.loads(result.stdout)["clients"] if c["client"] == "orphan"]
    timeline = orphan["sessions"][0]["events"]
    assert timeline[-1]["method"] == "session/end" and timeline[-1]["version"] == 2, timeline


class SlowStarts:
    """Counts slow connections that started; ``all`` is set once every one has."""

    def __init__(self, expected: int) -> None:
        self.left = expected
        self.all = anyio.Event()

    def one(self) -> None:
        self.left -= 1
        if not self.left:
            self.all.set()


async def slow_head(port: int, stop: anyio.Event, closed: list[bool], started: SlowStarts) -> None:
    """One connection sending a request head a line a second, never ending it;
    notes in ``closed`` whether the server closed it first."""
    try:
        stream = await anyio.connect_tcp("127.0.0.1", port)
    except OSError:
        closed.append(True)
        started.one()
        return
    counted = False
    async with stream:
        try:
            await stream.send(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
            started.one()
            counted = True
            while not stop.is_set():
                with anyio.move_on_after(1):
                    if not await stream.receive():
                        break
                await stream.send(b"X-Slow: 1\r\n")
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
            closed.append(True)
            if not counted:
                started.one()  # refused before its first line went out
            return
        closed.append(not stop.is_set())
