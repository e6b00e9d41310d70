"""Helpers for the fault matrix: a lab of its own per test, and the outcome record.

A :class:`Rig` is one test's own Redis (persistent, so it can be restarted with
its data; it can also be frozen with SIGSTOP, or filled to its ``maxmemory``),
server and updater. :func:`fault_case` records what a test injected and how many
notifications arrived, as one JSON line in ``MCP_LAB_FAULT_LOG`` when that
variable is set (``scripts/fault_table.py`` reads them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pytest
import redis

from mcp_lab import contract
from mcp_lab.process.embedded_redis import EmbeddedRedis, RedisNotFound, free_port, start_redis
from tests.support.lab import STATUS_URI, LabClient, LabProcess, connect, lab_env

FAULT_LOG_ENV = "MCP_LAB_FAULT_LOG"
# Bound of every wait for a log line or a notification.
BOUND = 20.0
# Keys of the filler that fills a rig's Redis to its maxmemory (Rig.fill_redis).
FILLER_PREFIX = "fault:filler:"
_FILLER_BYTES = 64 * 1024
SERVER_READY = r"\[lab\] server ready .*relay=subscribed"
UPDATER_READY = r"\[updater\] ready"


@dataclass
class FaultCase:
    """One injected fault and the notifications it should leave intact.

    ``notifications_expected`` counts the notifications the lab promises the tracked
    clients. A client tracked with ``promised=False`` holds a session the fault kills
    (its server dies): the lab promises it nothing, not even the one notification it
    was due. Those are counted apart (due, arrived anyway); more than one to any of
    them is still a duplicate."""

    fault: str
    stage: str
    notifications_expected: int
    clients: list[LabClient] = field(default_factory=list)
    unpromised: list[LabClient] = field(default_factory=list)

    def track(self, client: LabClient, *, promised: bool = True) -> LabClient:
        """Count this client's ``notifications/resources/updated`` in the outcome."""
        (self.clients if promised else self.unpromised).append(client)
        return client

    @property
    def received(self) -> int:
        return sum(client.updated.count(STATUS_URI) for client in self.clients)

    @property
    def unpromised_arrived(self) -> int:
        """Clients tracked with ``promised=False`` that got their notification anyway."""
        return sum(1 for client in self.unpromised if STATUS_URI in client.updated)

    @property
    def unpromised_extra(self) -> int:
        """Notifications past the first one to clients tracked with ``promised=False``."""
        return sum(max(client.updated.count(STATUS_URI) - 1, 0) for client in self.unpromised)


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
    record(case, ok=case.received == expected and case.unpromised_extra == 0)


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
        "not_promised": len(case.unpromised),
        "not_promised_arrived": case.unpromised_arrived,
        "not_promised_extra": case.unpromised_extra,
        "ok": ok,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


class Rig:
    """A test's own persistent Redis, server (fixed port) and updater; ``settings``
    are more ``MCP_TEST_*`` settings of both processes."""

    def __init__(self, delay: str, **settings: str) -> None:
        self.settings = {"update_delay_seconds": delay, **settings}
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
        proc = LabProcess(name, [sys.executable, "-m", "mcp_lab", command], env)
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

    async def restart_redis_empty(self, sig: int) -> None:
        """Stop redis-server with ``sig``, delete its data (append-only file, snapshot),
        and start it again on the same port: a Redis that came back without its data.
        Waits until the relay resubscribed."""
        await self.halt_redis(sig)
        for name in os.listdir(self.redis.data_dir):
            path = os.path.join(self.redis.data_dir, name)
            if name.startswith("appendonly") or name.endswith(".rdb"):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        left = [n for n in os.listdir(self.redis.data_dir) if "appendonly" in n or ".rdb" in n]
        assert not left, f"data left for the restarted Redis: {left}"
        await self.redis_back()

    @contextmanager
    def redis_frozen(self) -> Iterator[None]:
        """SIGSTOP redis-server for the block (SIGCONT after it): it keeps every
        connection open and answers nothing, so clients see timeouts, not errors."""
        self.redis.process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.redis.process.send_signal(signal.SIGCONT)

    def fill_redis(self) -> int:
        """Fill Redis to its ``maxmemory`` (policy ``noeviction``): a ``maxmemory`` 4 MB
        above what it uses, filler values written until Redis refuses one, then the
        limit set 1 MB below what it uses, so that no small write of the lab squeezes
        in under it. Returns how many filler keys were written."""
        with self.client() as client:
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", self._used(client) + 4 * 1024 * 1024)
            written = 0
            try:
                while True:
                    client.set(f"{FILLER_PREFIX}{written}", "x" * _FILLER_BYTES)
                    written += 1
            except redis.exceptions.OutOfMemoryError:
                pass
            client.config_set("maxmemory", self._used(client) - 1024 * 1024)
            assert self._refuses_writes(client), "Redis still takes writes: not full"
        return written

    def free_redis(self) -> None:
        """Delete the filler of :meth:`fill_redis` (``maxmemory`` stays where it is):
        Redis takes writes again."""
        with self.client() as client:
            keys = list(client.scan_iter(match=f"{FILLER_PREFIX}*", count=1000))
            if keys:
                client.delete(*keys)
            assert not self._refuses_writes(client), "Redis still refuses writes after the free"

    def refuses_writes(self) -> bool:
        """Whether Redis refuses a small write for want of memory now."""
        with self.client() as client:
            return self._refuses_writes(client)

    @staticmethod
    def _used(client: redis.Redis) -> int:
        return int(client.info("memory")["used_memory"])

    @staticmethod
    def _refuses_writes(client: redis.Redis) -> bool:
        try:
            client.set(f"{FILLER_PREFIX}probe", "1")
        except redis.exceptions.OutOfMemoryError:
            return True
        return False

    def lost_events_counted(self) -> int:
        """Evidence events the server counted as lost in ``mcp:events:lost``."""
        with self.client() as client:
            entries = client.xrange(contract.EVENTS_LOST_STREAM)
        return sum(int(fields["count"]) for _, fields in entries)

    def evidence(self) -> list[dict[str, str]]:
        """Every entry of the evidence stream ``mcp:events``, oldest first."""
        with self.client() as client:
            return [fields for _, fields in client.xrange(contract.EVENTS_STREAM)]

    async def healthz(self, timeout: float = BOUND) -> tuple[int, dict[str, Any], float]:
        """GET /healthz: its status, its body, and how many seconds it took."""
        start = time.monotonic()
        async with httpx2.AsyncClient(timeout=timeout) as http:
            response = await http.get(f"http://127.0.0.1:{self.port}/healthz")
        return response.status_code, response.json(), time.monotonic() - start

    def trigger_all(self) -> None:
        """Queue one update of every subscriber's state, due now (``mcp-lab trigger``)."""
        with self.client() as client:
            job = contract.UpdateJob(STATUS_URI, contract.ALL_SUBSCRIBERS, delay=0)
            client.xadd(contract.JOBS_STREAM, job.fields())  # type: ignore[arg-type]

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
            if self.redis.process.poll() is None:
                self.redis.process.send_signal(signal.SIGCONT)  # in case a test left it frozen
            for proc in self._started:
                if proc.process.poll() is None:
                    proc.process.send_signal(signal.SIGCONT)  # in case a test left it frozen
                proc.stop()
        finally:
            self.redis.stop()


@asynccontextmanager
async def rig(delay: str, **settings: str) -> AsyncIterator[Rig]:
    """A :class:`Rig` that is torn down whatever happens (started and stopped in a
    worker thread: the waits block)."""
    try:
        lab = await anyio.to_thread.run_sync(lambda: Rig(delay, **settings))
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


def is_stopped(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` is stopped (SIGSTOP) right now (Linux: /proc state ``T``)."""
    with open(f"/proc/{process.pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


@asynccontextmanager
async def many_clients(
    url: str, names: list[str], *, at_once: int = 10, timeout: float = 120.0
) -> AsyncIterator[list[LabClient]]:
    """One initialized SDK client per name (``at_once`` connecting at a time), all
    held open for the block and closed after it; in the order of ``names``."""
    clients: dict[str, LabClient] = {}
    all_in, release = anyio.Event(), anyio.Event()
    limiter = anyio.CapacityLimiter(at_once)

    async def hold(name: str) -> None:
        async with AsyncExitStack() as stack:
            async with limiter:
                clients[name] = await stack.enter_async_context(connect(url, name))
            if len(clients) == len(names):
                all_in.set()
            await release.wait()

    async with anyio.create_task_group() as group:
        for name in names:
            group.start_soon(hold, name)
        try:
            with anyio.fail_after(timeout):
                await all_in.wait()
            yield [clients[name] for name in names]
        finally:
            release.set()


async def session_of(server: LabProcess, client_name: str) -> str:
    """The session id the server gave the client named ``client_name``."""
    line = await server.await_line(rf"\[initialize\] .*client={client_name}/", BOUND)
    return line.split("session=")[1].split()[0]


async def sessions_of(server: LabProcess, names: list[str]) -> dict[str, str]:
    """The session id the server gave each client of ``names``, by name."""
    return {name: await session_of(server, name) for name in names}


def unique(name: str) -> str:
    """A client name no other test uses."""
    return f"{name}-{uuid.uuid4().hex[:6]}"
