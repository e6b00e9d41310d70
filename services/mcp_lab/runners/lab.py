"""A fresh lab for one client run: embedded Redis, ``mcp-lab server`` and ``updater``.

The processes are the same ones ``mcp-lab up`` runs, on free loopback ports, with
their output kept (for waiting on a line, and for the run's logs). The state scope
is ``shared``: the runner's update (target ``*``) bumps the one state every session
reads, so a client that re-reads without subscribing still meets version 2. A client
that subscribes is also updated by the lab itself, ``MCP_TEST_UPDATE_DELAY_SECONDS``
(here 1 s unless the caller sets it) after its subscribe. The scenario decides
``MCP_TEST_ENABLE_TOOL`` (whether the server offers its tool).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp_lab import contract, state, state_jobs
from mcp_lab.evidence import build, reader
from mcp_lab.evidence.build import Report
from mcp_lab.process.embedded_redis import free_port, launch_redis
from mcp_lab.process.lifeline import PARENT_PID_ENV
from mcp_lab.runners.program import Process
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import Scenario

_READY_TIMEOUT = 30.0
_FORCED = frozenset(
    {
        "REDIS_URL",
        "MCP_TEST_HOST",
        "MCP_TEST_PORT",
        "MCP_TEST_STATE_SCOPE",
        "MCP_TEST_ENABLE_TOOL",
        "MCP_TEST_SCENARIO",
    }
)
UPDATE_DELAY_SECONDS = 1.0


class RunLab:
    """The lab started for one run (not the server's :class:`mcp_lab.server.service.Lab`):
    its URLs, processes and Redis."""

    def __init__(
        self,
        redis_url: str,
        port: int,
        server: Process | None,
        updater: Process,
        scenario: Scenario,
        env: dict[str, str] | None = None,
    ) -> None:
        self.redis_url = redis_url
        # The environment its processes run with: another process of this lab (a stdio
        # server that a bridge starts) takes the same Redis, scope and scenario from it.
        self.env = env or {}
        self.scenario = scenario
        self.base_url = f"http://127.0.0.1:{port}"
        self.mcp_url = f"{self.base_url}/mcp"
        self.server = server  # None: a lab for a stdio client, which starts its own
        self.updater = updater
        self.run_id = "0-0"
        self.updates: list[str] = []

    @property
    def http_server(self) -> Process:
        """The lab's HTTP server (a lab started with ``serve_http``)."""
        if self.server is None:
            raise RuntimeError("this lab serves no HTTP (its client starts a stdio server)")
        return self.server

    async def apply_timeline(self, timeout: float = 15.0) -> str:
        """Queue the scenario's timeline for every subscriber (target ``*``, the shared
        state here), each step ``after`` seconds from now, and wait until the updater
        has applied the first one; returns its log line."""
        uri = self.scenario.read_uri
        jobs = [
            contract.UpdateJob(
                uri=action.uri or uri, target="*", delay=action.after, action=action.kind
            )
            for action in sorted(self.scenario.timeline, key=lambda a: a.after)
        ]
        line = await self.enqueue(jobs, timeout)
        self.updates.append(line)
        return line

    async def enqueue(self, jobs: list[contract.UpdateJob], timeout: float = 15.0) -> str:
        """Queue ``jobs`` for the updater, and wait until it has applied the first one;
        returns its log line."""
        since = len(self.updater.lines)
        redis = state.connect(self.redis_url)
        try:
            await state_jobs.ensure_job_group(redis)
            entry_ids = [await state_jobs.enqueue_job(redis, job) for job in jobs]
        finally:
            await redis.aclose()
        return await self.updater.wait_for(
            rf"job={re.escape(entry_ids[0])}( published=| had no )", timeout, since
        )

    def timeline_seconds(self) -> float:
        """How long the scenario's timeline runs after its first step."""
        return max((a.after for a in self.scenario.timeline), default=0.0)

    async def evidence(self) -> tuple[list[contract.Event], Report]:
        """Every event recorded in this lab's run, and the run's report (scored in
        the lab's scenario by the one report builder)."""
        redis = state.connect(self.redis_url)
        try:
            _, first, last = await reader.run_bounds(redis, self.run_id)
            events = await reader.read_events(redis, first, last)
            made = await build.build(redis, run=self.run_id, scenario=self.scenario.name)
            return events, made
        finally:
            await redis.aclose()


def _env(
    redis_url: str, port: int, enable_tool: bool, update_delay: float | None, scenario: str
) -> dict[str, str]:
    """The caller's environment (``MCP_TEST_*`` settings included), with the Redis,
    port, scope and tool setting of this lab; a .env file is not read (the lab runs in
    the run's own directory)."""
    env = {k: v for k, v in os.environ.items() if k not in _FORCED}
    # A subscriber is updated this soon after its subscribe (the lab's own promise);
    # the runner's observation window covers it. The caller's setting wins, unless
    # the run holds the lab's own updates back (``update_delay``).
    env.setdefault("MCP_TEST_UPDATE_DELAY_SECONDS", str(UPDATE_DELAY_SECONDS))
    if update_delay is not None:
        env["MCP_TEST_UPDATE_DELAY_SECONDS"] = str(update_delay)
    env.update(
        REDIS_URL=redis_url,
        PYTHONUNBUFFERED="1",
        MCP_TEST_PORT=str(port),
        MCP_TEST_HOST="127.0.0.1",
        MCP_TEST_STATE_SCOPE=contract.SHARED_SCOPE,
        MCP_TEST_ENABLE_TOOL="true" if enable_tool else "false",
        MCP_TEST_SCENARIO=scenario,
    )
    # Server and updater watch this runner too: re-parented, they stop.
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


_SERVER_READY = r"\[lab\] server ready .*relay=subscribed"
_PORT_TAKEN = r"\[lab\] could not listen on "
_PORT_ATTEMPTS = 3


@asynccontextmanager
async def running_lab(
    workdir: Path,
    enable_tool: bool = False,
    update_delay: float | None = None,
    scenario: Scenario | None = None,
    serve_http: bool = True,
) -> AsyncIterator[RunLab]:
    """Start Redis, server and updater (side by side, each waited for), and a new
    observation run;
    with ``enable_tool`` the server offers ``get_review_status``; ``update_delay``
    overrides ``MCP_TEST_UPDATE_DELAY_SECONDS`` (a scored run sets it beyond the run:
    there the runner applies every update itself); ``scenario``: what the lab plays
    (the default one when None); without ``serve_http`` no HTTP server starts (a stdio
    client starts the lab's server itself)."""
    scenario = scenario or registry.get(registry.DEFAULT)
    # Redis, server and updater start side by side (server and updater wait for Redis
    # by themselves), each from this thread, so that each ends with it (a runner killed
    # mid-run leaves nothing behind).
    redis = launch_redis(free_port(), with_parent=True)
    processes: list[Process] = []
    try:
        python = [sys.executable, "-m", "mcp_lab"]
        port = free_port()
        env = _env(redis.url, port, enable_tool, update_delay, scenario.name)
        server: Process | None = None
        if serve_http:
            server = await Process.start("server", [*python, "server"], env, workdir)
            processes.append(server)
        updater = await Process.start("updater", [*python, "updater"], env, workdir)
        processes.append(updater)
        redis_ready = asyncio.create_task(asyncio.to_thread(redis.wait_ready, _READY_TIMEOUT))
        updater_ready = asyncio.create_task(
            updater.wait_for(r"\[updater\] ready", _READY_TIMEOUT)
        )
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            if server is None:
                break
            said = await server.wait_for(f"{_SERVER_READY}|{_PORT_TAKEN}", _READY_TIMEOUT)
            if not re.search(_PORT_TAKEN, said):
                break
            # The free port was taken between finding it and binding it (runs side by
            # side, other processes): another one.
            await server.stop()
            processes.remove(server)
            if attempt == _PORT_ATTEMPTS:
                raise TimeoutError(f"server: {said} ({attempt} free ports taken in a row)")
            port = free_port()
            server_env = _env(redis.url, port, enable_tool, update_delay, scenario.name)
            server = await Process.start("server", [*python, "server"], server_env, workdir)
            processes.append(server)
        await redis_ready
        await updater_ready
        lab = RunLab(redis.url, port, server, updater, scenario, env)
        connection = state.connect(redis.url)
        try:
            lab.run_id = await reader.start_run(connection)
        finally:
            await connection.aclose()
        yield lab
    finally:
        await asyncio.gather(*(process.stop() for process in processes))
        await asyncio.to_thread(redis.stop)
