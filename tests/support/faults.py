"""Helpers for the fault matrix: a lab of its own per test, and the outcome record.

A :class:`Rig` is one test's own Redis (persistent, so it can be restarted with
its data), server and updater. :func:`fault_case` records what a test injected
and how many notifications arrived, as one JSON line in ``MCP_LAB_FAULT_LOG``
when that variable is set (``scripts/fault_table.py`` reads them).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import anyio
import pytest
import redis

from services import contract
from services.process.embedded_redis import EmbeddedRedis, RedisNotFound, free_port, start_redis
from tests.support.lab import STATUS_URI, LabClient, LabProcess, lab_env

FAULT_LOG_ENV = "MCP_LAB_FAULT_LOG"
# Bound of every wait for a log line or a notification.
BOUND = 20.0
SERVER_READY = r"\[lab\] server ready .*relay=subscribed"
UPDATER_READY = r"\[updater\] ready"


@dataclass
class FaultCase:
    """One injected fault and the notifications it should leave intact."""

    fault: str
    stage: str
    notifications_expected: int
    clients: list[LabClient] = field(default_factory=list)

    def track(self, client: LabClient) -> LabClient:
        """Count this client's ``notifications/resources/updated`` in the outcome."""
        self.clients.append(client)
        return client

    @property
    def received(self) -> int:
        return sum(client.updated.count(STATUS_URI) for client in self.clients)


@asynccontextmanager
async def fault_case(fault: str, stage: str, expected: int) -> AsyncIterator[FaultCase]:
    """Run a test's body as one fault case, and record its outcome, passed or not."""
    case = FaultCase(fault, stage, expected)
    try:
        yield case
    except pytest.skip.Exception:
        raise  # nothing was injected
    except BaseException:
        record(case, ok=False)
        raise
    record(case, ok=case.received == expected)


def record(case: FaultCase, ok: bool) -> None:
    """Append the case's outcome to ``$MCP_LAB_FAULT_LOG`` (nothing when it is unset)."""
    path = os.environ.get(FAULT_LOG_ENV)
    if not path:
        return
    line = {
        "fault": case.fault,
        "stage": case.stage,
        "notifications_expected": case.notifications_expected,
        "notifications_received": case.received,
        "ok": ok,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


class Rig:
    """A test's own persistent Redis, server (fixed port) and updater."""

    def __init__(self, delay: str) -> None:
        self.settings = {"update_delay_seconds": delay}
        self.port = free_port()
        self._started: list[LabProcess] = []
        self.redis: EmbeddedRedis = start_redis(persistent=True)
        try:
            self.server = self.start_server()
            self.updater = self.start_updater()
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start_server(self) -> LabProcess:
        """A server on the rig's port (the same one after a restart)."""
        env = lab_env(self.redis.url, port=str(self.port), **self.settings)
        self.server = self._start(f"server:{self.port}", "server", env, SERVER_READY)
        return self.server

    def start_updater(self) -> LabProcess:
        env = lab_env(self.redis.url, **self.settings)
        self.updater = self._start("updater", "updater", env, UPDATER_READY)
        return self.updater

    # The starts above block until the process is ready; async tests use these.
    async def astart_server(self) -> LabProcess:
        return await anyio.to_thread.run_sync(self.start_server)

    async def astart_updater(self) -> LabProcess:
        return await anyio.to_thread.run_sync(self.start_updater)

    def _start(self, name: str, command: str, env: dict[str, str], ready: str) -> LabProcess:
        """Like ``tests.support.lab.start_server``, but the process is ours to stop even when
        it never gets ready."""
        proc = LabProcess(name, [sys.executable, "-m", "services", command], env)
        self._started.append(proc)
        proc.wait_for(ready, timeout=30)
        return proc

    def client(self) -> redis.Redis:
        """A synchronous Redis client for checks (close it after use)."""
        return redis.Redis.from_url(self.redis.url, decode_responses=True, socket_timeout=5)

    def pending_jobs(self) -> int:
        """Jobs read by an updater and not yet applied."""
        with self.client() as client:
            return int(client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)["pending"])

    def queued_jobs(self) -> int:
        """Jobs in the stream (applied jobs are deleted from it)."""
        with self.client() as client:
            return int(client.xlen(contract.JOBS_STREAM))

    def version(self, session: str) -> int | None:
        """The version stored for ``session`` (None when nothing was written)."""
        with self.client() as client:
            value = client.hget(contract.state_key(session, STATUS_URI), "version")
        return None if value is None else int(value)

    async def restart_redis(self, sig: int, *, server_frozen: bool = False) -> None:
        """Stop redis-server with ``sig`` and start it again (see :meth:`redis_back`)."""
        await self.halt_redis(sig)
        await self.redis_back(server_frozen=server_frozen)

    async def halt_redis(self, sig: int) -> None:
        """Stop redis-server with ``sig``; its data folder stays."""
        await anyio.to_thread.run_sync(lambda: self.redis.halt(sig))

    async def redis_back(self, *, server_frozen: bool = False) -> None:
        """Start redis-server again on the same port and data, and wait until the
        relay resubscribed (unless the server is frozen). The updater is not waited
        for: its commands retry on a new connection, so it may ride over the restart
        without a log line; what it must do next, each test awaits."""
        server_mark = self.server.mark()
        await anyio.to_thread.run_sync(self.redis.restart)
        if not server_frozen:
            await self.server.await_line(r"\[relay\] subscribed", BOUND, since=server_mark)

    async def barrier(self) -> None:
        """Push one job for a session nobody holds through updater and relay, and wait
        until both handled it: everything queued before it has been handled too."""
        target = f"barrier-{uuid.uuid4().hex[:8]}"
        server_mark, updater_mark = self.server.mark(), self.updater.mark()
        with self.client() as client:
            job = contract.UpdateJob(STATUS_URI, target, delay=0)
            client.xadd(contract.JOBS_STREAM, job.fields())  # type: ignore[arg-type]
        await self.updater.await_line(
            rf"\[resource/update\] .*scope={target} ", BOUND, updater_mark
        )
        await self.server.await_line(
            rf"\[relay\] no subscribed session here .*session={target}$", BOUND, server_mark
        )

    def show_logs(self, last: int = 80) -> None:
        """Print the tail of every process's output (pytest shows it on failure)."""
        for proc in self._started:
            print(f"----- {proc.name} (pid {proc.process.pid}) -----")
            print("\n".join(proc.lines[-last:]))

    def close(self) -> None:
        try:
            for proc in self._started:
                if proc.process.poll() is None:
                    proc.process.send_signal(signal.SIGCONT)  # in case a test left it frozen
                proc.stop()
        finally:
            self.redis.stop()


@asynccontextmanager
async def rig(delay: str) -> AsyncIterator[Rig]:
    """A :class:`Rig` that is torn down whatever happens (started and stopped in a
    worker thread: the waits block)."""
    try:
        lab = await anyio.to_thread.run_sync(Rig, delay)
    except RedisNotFound as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and no redis-server: {exc}")
        pytest.skip(f"no redis-server: {exc}")
    try:
        yield lab
    except BaseException:
        lab.show_logs()
        raise
    finally:
        await anyio.to_thread.run_sync(lab.close)


@contextmanager
def frozen(proc: LabProcess) -> Iterator[None]:
    """SIGSTOP ``proc`` for the block: it keeps its sockets but reads nothing."""
    proc.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.process.send_signal(signal.SIGCONT)


async def session_of(server: LabProcess, client_name: str) -> str:
    """The session id the server gave the client named ``client_name``."""
    line = await server.await_line(rf"\[initialize\] .*client={client_name}/", BOUND)
    return line.split("session=")[1].split()[0]


def unique(name: str) -> str:
    """A client name no other test uses."""
    return f"{name}-{uuid.uuid4().hex[:6]}"
