"""The scale profile: three server replicas behind HAProxy, one Redis, one updater.

Brings up ``docker compose --profile scale up --scale server=3`` (docs/usage.md's
command) under a project of its own, on a network compose makes for it, and
drives it through the balancer only:

* 30 raw Streamable HTTP sessions (httpx, so every response header is seen),
  two SDK Streamable HTTP clients and two legacy SSE clients subscribe;
* the sessions spread over all three replicas, and every request of a session
  (POSTs, the GET stream, DELETE) is answered by the replica that minted its id
  (HAProxy's ``X-Lab-Replica`` header, and the lab's own per-replica session sets
  in Redis say the same);
* ONE publish is received by the three relays and reaches every subscribed
  session on every replica;
* ``mcp-lab report`` counts every session as notified, with no missing events.

Needs a Docker engine with ``docker compose`` v2, like tests/system/test_docker.py:
outside CI it skips when no engine answers; with ``CI=true`` it fails. Redis is
reached at its container's address on the project's network (Linux hosts).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from redis.asyncio import Redis

from mcp_lab import contract, protocol
from mcp_lab.process.embedded_redis import free_port
from mcp_lab.settings import LabSettings
from scripts.devtools import compose_projects
from tests.support.docker_engine import skip_unless_docker_is_usable
from tests.support.lab import ROOT, STATUS_URI, connect, connect_sse

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.timeout(900)]

REPLICAS = 3
SESSIONS = 30
BOUND = 30.0
WHOLE_TEST_BOUND = 150.0
PROTOCOL = "2025-11-25"
UPDATED = "notifications/resources/updated"
ADDRESS_FORMAT = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"

skip_unless_docker_is_usable()


@dataclass
class Stack:
    project: str
    base_url: str  # the balancer, http://127.0.0.1:PORT
    redis_url: str  # the redis container on the project's network

    def compose(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run(
            ["docker", "compose", "-p", self.project, "--profile", "scale", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, f"docker compose {args}: {result.stderr[-3000:]}"
        return result.stdout


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    port = free_port()
    compose_projects.remove_leftovers()
    project = compose_projects.project_name("scale")
    saved = dict(os.environ)
    os.environ.update(
        {
            "MCP_LAB_SERVER_PORT": "0",  # each replica on an ephemeral loopback port
            "MCP_LAB_HTTP_PORT": str(port),  # the balancer
            # No job of the updater comes due during the test: the one publish is ours.
            "MCP_TEST_UPDATE_DELAY_SECONDS": "3600",
            "DOCKER_BUILDKIT": "0",
        }
    )
    stack = Stack(project, f"http://127.0.0.1:{port}", "")
    try:
        stack.compose("up", "--build", "--wait", "--scale", f"server={REPLICAS}")
        redis_id = stack.compose("ps", "-q", "redis").strip()
        address = subprocess.run(
            ["docker", "inspect", "-f", ADDRESS_FORMAT, redis_id],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        stack.redis_url = f"redis://{address}:6379/0"
        yield stack
    finally:
        try:
            stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout=180)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            compose_projects.remove_images(project)


@dataclass
class RawSession:
    """One session spoken in plain HTTP, noting which replica answered each request."""

    name: str
    session_id: str = ""
    served_by: list[str] = field(default_factory=list)
    primed: anyio.Event = field(default_factory=anyio.Event)
    updated: anyio.Event = field(default_factory=anyio.Event)

    def headers(self) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self.session_id:
            headers |= {"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": PROTOCOL}
        return headers

    def note(self, response: httpx.Response) -> None:
        self.served_by.append(response.headers.get("x-lab-replica", "?"))

    async def post(self, http: httpx.AsyncClient, url: str, message: dict[str, Any]) -> Any:
        response = await http.post(url, content=json.dumps(message), headers=self.headers())
        self.note(response)
        assert response.status_code in (200, 202), (self.name, message, response.status_code)
        self.session_id = response.headers.get("mcp-session-id", self.session_id)
        if response.status_code == 202:
            return None
        if response.headers["content-type"].startswith("application/json"):
            return response.json()
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])

    async def read_stream(self, http: httpx.AsyncClient, url: str) -> None:
        """The GET stream: live once its first bytes arrive; sets ``updated`` on the
        first resources/updated notification."""
        async with http.stream("GET", url, headers=self.headers()) as response:
            self.note(response)
            assert response.status_code == 200, (self.name, response.status_code)
            async for line in response.aiter_lines():
                self.primed.set()
                if line.startswith("data:") and line[5:].strip():
                    if json.loads(line[5:]).get("method") == UPDATED:
                        self.updated.set()
                        return


async def open_session(
    http: httpx.AsyncClient, url: str, session: RawSession, tasks: anyio.abc.TaskGroup
) -> None:
    reply = await session.post(
        http,
        url,
        protocol.initialize_request(session.name, "1.0", PROTOCOL),
    )
    assert "result" in reply and session.session_id, reply
    await session.post(http, url, protocol.initialized_notification())
    tasks.start_soon(session.read_stream, http, url)
    with anyio.fail_after(BOUND):
        await session.primed.wait()
    for i, (method, params) in enumerate(
        [
            ("resources/list", {}),
            ("resources/read", {"uri": STATUS_URI}),
            ("resources/subscribe", {"uri": STATUS_URI}),
        ],
        start=2,
    ):
        reply = await session.post(
            http, url, {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
        )
        assert "result" in reply, (session.name, method, reply)


async def held_by_lab_replica(redis: Redis) -> dict[str, set[str]]:
    """The lab's own record: lab replica id -> subscribed sessions it holds."""
    held = {}
    async for key in redis.scan_iter(match=contract.REPLICA_SESSIONS_PATTERN):
        name = key if isinstance(key, str) else key.decode()
        held[contract.replica_of_sessions_key(name)] = {
            str(s, "utf-8") if isinstance(s, bytes) else s for s in await redis.smembers(key)
        }
    return held


async def test_sessions_spread_stick_and_one_publish_reaches_every_replica(
    stack: Stack,
) -> None:
    url = f"{stack.base_url}/mcp"
    sessions = [RawSession(f"scale-raw-{i}") for i in range(SESSIONS)]
    redis = Redis.from_url(stack.redis_url)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    try:
        # A bound on everything: an SDK client whose requests reach the wrong replica
        # waits for replies that never come.
        with anyio.fail_after(WHOLE_TEST_BOUND):
            await _drive(stack, url, sessions, redis, limits)
    finally:
        await redis.aclose()


async def _drive(
    stack: Stack, url: str, sessions: list[RawSession], redis: Redis, limits: httpx.Limits
) -> None:
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(BOUND, read=None), limits=limits) as http,
        anyio.create_task_group() as streams,
        connect(url, "scale-sdk-a") as sdk_a,
        connect(url, "scale-sdk-b") as sdk_b,
        connect_sse(f"{stack.base_url}/sse", "scale-sse-a") as sse_a,
        connect_sse(f"{stack.base_url}/sse", "scale-sse-b") as sse_b,
    ):
        sdk = [sdk_a, sdk_b, sse_a, sse_b]
        gate = anyio.Semaphore(10)

        async def opened(session: RawSession) -> None:
            async with gate:
                await open_session(http, url, session, streams)

        async with anyio.create_task_group() as setup:
            for session in sessions:
                setup.start_soon(opened, session)
        for client in sdk:
            await client.read_text()  # the read of version 1 that level 4 and up build on
            await client.session.subscribe_resource(STATUS_URI)

        # Spread and stickiness, as the balancer saw it.
        slot_of = {}
        for session in sessions:
            assert len(set(session.served_by)) == 1, (session.name, session.served_by)
            slot_of[session.session_id] = session.served_by[0]
        slots = set(slot_of.values())
        assert len(slots) == REPLICAS, f"sessions reached only {slots}"

        # ... and as the lab saw it: each lab replica holds exactly the sessions of
        # one balancer slot (its subscribe, GET stream and reads all landed there).
        held = await held_by_lab_replica(redis)
        alive = [k async for k in redis.scan_iter(match="mcp:replica:*:alive")]
        assert len(alive) == REPLICAS
        assert len(held) == REPLICAS, held
        by_slot: dict[str, set[str]] = defaultdict(set)
        for session_id, slot in slot_of.items():
            by_slot[slot].add(session_id)
        raw_ids = set(slot_of)
        assert sorted(map(sorted, by_slot.values())) == sorted(
            sorted(ids & raw_ids) for ids in held.values()
        )
        subscribers = await redis.smembers(contract.subscribers_key(STATUS_URI))
        assert len(subscribers) == SESSIONS + len(sdk)

        # One publish: every replica's relay receives it ...
        receivers = await redis.publish(LabSettings().updates_channel, STATUS_URI.encode())
        assert receivers == REPLICAS
        # ... and every subscribed session on every replica is notified.
        with anyio.fail_after(BOUND):
            for session in sessions:
                await session.updated.wait()
            for client in sdk:
                await client.wait_updated(1, timeout=BOUND)

        # DELETE goes to the session's replica too (elsewhere it would be a 404).
        for session in sessions:
            response = await http.delete(url, headers=session.headers())
            session.note(response)
            assert response.status_code == 200, (session.name, response.status_code)
            assert set(session.served_by) == {slot_of[session.session_id]}
        streams.cancel_scope.cancel()

    # The record: every session reached "notified", nothing missing.
    report = json.loads(
        stack.compose(
            "exec", "-T", "--index", "1", "server", "mcp-lab", "report", "--format", "json"
        )
    )
    assert report["missing_events"] == 0
    levels = {c["client"]: c["level"] for c in report["clients"]}
    names = [s.name for s in sessions] + ["scale-sdk-a", "scale-sdk-b"]
    names += ["scale-sse-a", "scale-sse-b"]
    assert {n: levels.get(n, 0) >= 5 for n in names} == {n: True for n in names}
