#!/usr/bin/env python3
"""Benchmark: the lab under load, next to a bare floor server, in one run.

Starts a local redis-server, the lab (server + updater, real processes) and the
floor (scripts/floor.py: the same protocol subset with no state store), drives
both with the raw client of scripts/rawmcp.py, and prints one table:

- storm N: N sessions set up (initialize + GET stream), then all subscribe at
  once: refused subscribes, missing notifications, evidence records missing
  from ``mcp:events`` (per session: the initialize, the subscribe, the
  notification; awaited until the lab's writer is idle, and those still missing
  looked for again after the sessions ended: "came late" or missing, beside the
  lab's own count of records it could not write), subscribers left in Redis
  after every session ended, setup sessions/s;
- fan-out N: N sessions subscribed in shared scope, one publish: p50/p99/max from
  the publish to each notification;
- reads/s on one session at concurrency 16;
- KB per session: server RSS and Redis ``used_memory`` growth over N idle
  subscribed sessions with their GET streams open;
- cold start: ``mcp-lab up`` (its own embedded Redis) to the first initialize.

    .venv/bin/python scripts/bench.py [--storm 1000] [--fanout 500] [--sessions 500]
        [--reads-seconds 5] [--code DIR] [--only storm,late,fanout,reads,memory,cold]
        [--peer DIR [--peer-node NODE]]
    .venv/bin/python scripts/bench.py --compose-replicas 1,3 [--storm 1000] [--fanout 1000]

``--code DIR`` runs the lab from another checkout (e.g. ``git archive`` of an older
commit) with this venv, to compare before and after on the same machine. Every
phase is bounded: sizes come from the flags, every wait has a timeout.

``--peer DIR`` measures the peer TypeScript lab of issue 24 too (a built checkout
of it; scripts/bench_peer.py), with the same client, in a column between the lab
and the floor: storm, late, reads and cold start (it has no shared update
to fan out). The last column is the lab's figure divided by the peer's.

``--compose-replicas 1,3`` runs the storm and the fan-out instead against the
compose scale profile (N server replicas behind HAProxy, one Redis) for each
count, one column per count (scripts/bench_replicas.py); needs Docker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_peer import Peer  # noqa: E402
from rawmcp import STATUS_URI, HttpError, RawClient  # noqa: E402

from services.writer import BATCH_TIMEOUT_SECONDS  # noqa: E402

HOST = "127.0.0.1"
EVENTS_STREAM = "mcp:events"
SUBSCRIBERS_KEY = f"mcp:subscribers:{STATUS_URI}"
UPDATES_CHANNEL = "mcp:resources:updated"
SESSION_ENDED = r"\[session/end\] closed"  # the server's log line for each ended session
_CLIENT_ERRORS = (OSError, HttpError, asyncio.IncompleteReadError, TimeoutError, ValueError)


# ---------------------------------------------------------------- processes


class Proc:
    """A child process with its output collected, waitable for a line."""

    def __init__(self, name: str, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            with self._cond:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 30.0) -> None:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(regex.search(line) for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    tail = "\n".join(self.lines[-20:])
                    raise RuntimeError(f"{self.name}: no {pattern!r} in {timeout}s:\n{tail}")
                self._cond.wait(min(left, 0.5))

    def count(self, pattern: str) -> int:
        regex = re.compile(pattern)
        with self._cond:
            return sum(1 for line in self.lines if regex.search(line))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# Modules the lab's processes must not find (--without): a folder of stand-ins that
# raise ImportError, first on their PYTHONPATH, so "auto" choices fall back.
HIDDEN: list[str] = []


def _hiding_path() -> str:
    folder = Path(tempfile.gettempdir()) / f"mcp-lab-bench-without-{'-'.join(sorted(HIDDEN))}"
    for name in HIDDEN:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('{name} hidden by scripts/bench.py --without')\n"
        )
    return str(folder)


def lab_env(redis_url: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
    env.update(REDIS_URL=redis_url, PYTHONUNBUFFERED="1", MCP_TEST_LOG_LEVEL="WARNING")
    env.update({f"MCP_TEST_{k.upper()}": v for k, v in settings.items()})
    if HIDDEN:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_hiding_path(), env.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    from services.cli.embedded_redis import free_port as free

    return free()


def start_lab(code: Path, redis_url: str, port: int, updater: bool, **settings: str) -> list[Proc]:
    """Server (and updater) of the lab in ``code``, ready to serve."""
    env = lab_env(redis_url, port=str(port), **settings)
    env["MCP_TEST_LOG_LEVEL"] = "INFO"  # the ready lines are INFO
    python = [sys.executable, "-m", "services"]
    server = Proc("server", [*python, "server"], code, env)
    procs = [server]
    try:
        server.wait_for(r"\[lab\] server ready")
        if updater:
            procs.append(Proc("updater", [*python, "updater"], code, env))
            procs[-1].wait_for(r"\[updater\] ready")
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return procs


def start_floor(port: int, redis_url: str | None = None, delay: float = 0.0) -> Proc:
    command = [sys.executable, str(ROOT / "scripts" / "floor.py"), "--port", str(port)]
    if redis_url:
        command += ["--redis-url", redis_url]
    if delay:
        command += ["--delay", str(delay)]
    floor = Proc("floor", command, ROOT, dict(os.environ))
    floor.wait_for(r"floor ready")
    if redis_url:
        floor.wait_for(r"floor subscribed")
    return floor


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- sessions


async def setup_sessions(
    port: int,
    n: int,
    concurrency: int,
    name: str = "storm",
    timeout: float = 60.0,
    live_at_head: bool = False,
) -> tuple[list[RawClient], Counter[str], float]:
    """``n`` sessions initialized with their GET stream live (at most ``concurrency``
    being set up at a time): the ready ones, the failures by reason, the seconds taken.
    ``live_at_head``: a stream is live at its 200 head (a server with no priming event)."""
    gate = asyncio.Semaphore(concurrency)
    failures: Counter[str] = Counter()

    async def one(i: int) -> RawClient | None:
        client = RawClient(HOST, port, name=f"{name}-{i}")
        async with gate:
            try:
                async with asyncio.timeout(timeout):
                    await client.initialize()
                    await client.open_stream(live_at_head=live_at_head)
            except _CLIENT_ERRORS as exc:
                failures[_reason(exc)] += 1
                await client.close()
                return None
        return client

    started = time.perf_counter()
    clients = await asyncio.gather(*(one(i) for i in range(n)))
    return [c for c in clients if c], failures, time.perf_counter() - started


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:100]}"


async def subscribe_all(clients: list[RawClient]) -> tuple[list[RawClient], Counter[str]]:
    """Every client subscribes at the same moment: the accepted ones and the refusals."""
    refusals: Counter[str] = Counter()

    async def one(client: RawClient) -> bool:
        try:
            reply = await client.request("resources/subscribe", {"uri": STATUS_URI})
        except _CLIENT_ERRORS as exc:
            refusals[_reason(exc)] += 1
            return False
        if "error" in reply:
            refusals[str(reply["error"].get("message", reply["error"]))[:120]] += 1
            return False
        return True

    accepted = await asyncio.gather(*(one(c) for c in clients))
    return [c for c, ok in zip(clients, accepted, strict=True) if ok], refusals


@dataclass
class StormResult:
    n: int
    setup_failed: Counter[str]
    refused: Counter[str]
    missing_notifications: int
    evidence_expected: int
    evidence_missing: int | None
    subscribers_left: int | None
    setup_seconds: float
    seconds: float
    setup_cpu_ms: float | None = None  # server CPU per session set up
    end_failed: int = 0  # DELETEs that failed (those sessions stay subscribed)
    # Records not there when the wait for them ended but found after the sessions
    # ended (late, not lost), and the records the lab itself counted as lost
    # (``mcp:events:lost``: a write that failed).
    evidence_late: int = 0
    evidence_counted_lost: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def sessions_per_second(self) -> float:
        ready = self.n - sum(self.setup_failed.values())
        return ready / self.setup_seconds if self.setup_seconds else 0.0

    def summary(self) -> str:
        evidence = "-" if self.evidence_missing is None else str(self.evidence_missing)
        left = "-" if self.subscribers_left is None else str(self.subscribers_left)
        text = (
            f"storm {self.n}: setup failed {sum(self.setup_failed.values())}, "
            f"refused {sum(self.refused.values())}, missing notifications "
            f"{self.missing_notifications}, evidence missing {evidence}/"
            f"{self.evidence_expected}{self.evidence_notes()}, ends failed {self.end_failed}, "
            f"subscribers left {left}, "
            f"setup {self.sessions_per_second:.0f} sessions/s, total {self.seconds:.1f}s"
        )
        for reason, count in (self.setup_failed + self.refused).most_common(3):
            text += f"\n  {count} x {reason}"
        return text

    def evidence_notes(self) -> str:
        """What became of records not found at first: came late, counted lost by the lab."""
        notes = []
        if self.evidence_late:
            notes.append(f"{self.evidence_late} more came late")
        if self.evidence_counted_lost:
            notes.append(f"{self.evidence_counted_lost} counted lost by the lab")
        return f" ({', '.join(notes)})" if notes else ""


# Per session, what the evidence record must hold after a storm.
_EXPECTED = (
    ("in", "initialize"),
    ("in", "resources/subscribe"),
    ("out", "notifications/resources/updated"),
)


# How long ``mcp:events`` may take no entry, with records still missing, before
# they count as missing: longer than one batch of the server's writer may take
# (services.writer.BATCH_TIMEOUT_SECONDS). By then every write it had begun is in
# the stream or failed, and a failed one is counted by the lab in mcp:events:lost.
SETTLE_SECONDS = BATCH_TIMEOUT_SECONDS + 2
# Bound of the whole wait for records.
EVIDENCE_WAIT_SECONDS = 120.0
_Record = tuple[str, str, str]


async def missing_evidence(
    redis: Any,
    wanted: set[_Record],
    settle_seconds: float = SETTLE_SECONDS,
    bound_seconds: float = EVIDENCE_WAIT_SECONDS,
) -> set[_Record]:
    """The ``wanted`` records (session, direction, method) not in ``mcp:events``.

    Reads the whole stream, then follows it (XREAD BLOCK) while records are missing,
    until all are there, or the stream took no entry for ``settle_seconds`` (the
    lab's writer is idle: see SETTLE_SECONDS), or ``bound_seconds`` passed. The
    stream growing with other records keeps the wait going: the records come from
    one writer, in order. ``settle_seconds=0``: one read, no wait."""
    have: set[_Record] = set()
    last = "-"
    deadline = time.monotonic() + bound_seconds
    while True:
        entries = await redis.xrange(EVENTS_STREAM, min=last, max="+")
        for entry_id, fields in entries:
            key = (
                fields.get(b"session", b"").decode(),
                fields.get(b"direction", b"").decode(),
                fields.get(b"method", b"").decode(),
            )
            if key in wanted:
                have.add(key)
            last = f"({entry_id.decode()}"
        left = deadline - time.monotonic()
        if len(have) == len(wanted) or settle_seconds <= 0 or left <= 0:
            return wanted - have
        block_ms = max(1, int(min(settle_seconds, left) * 1000))
        newer = await redis.xread(
            {EVENTS_STREAM: last[1:] if last != "-" else "0-0"}, block=block_ms, count=1
        )
        if not newer:
            return wanted - have


async def counted_lost(redis: Any) -> int:
    """Evidence records the lab counted as lost (``mcp:events:lost``; the lab adds
    a count there once Redis takes its next write)."""
    from services.evidence.reader import lost_between

    return await lost_between(redis, None, None)


async def storm(
    port: int,
    n: int,
    *,
    redis_url: str | None = None,
    concurrency: int = 200,
    timeout: float = 60.0,
    server_pid: int | None = None,
    ended: Callable[[], int] | None = None,
    on_subscribed: Callable[[list[RawClient]], Awaitable[None]] | None = None,
    live_at_head: bool = False,
) -> StormResult:
    """``n`` sessions, then every one subscribes at once (see the module docstring).
    With ``redis_url`` the evidence record and the subscriber set are checked; the
    latter once ``ended()`` (sessions the server has ended so far) reaches them all.
    ``on_subscribed`` is awaited with the subscribed clients before the notifications
    are awaited. ``live_at_head``: see ``setup_sessions``."""
    started = time.perf_counter()
    cpu = cpu_seconds(server_pid) if server_pid else 0.0
    clients, setup_failed, setup_seconds = await setup_sessions(
        port, n, concurrency, live_at_head=live_at_head
    )
    setup_cpu_ms = None
    if server_pid and clients:
        setup_cpu_ms = (cpu_seconds(server_pid) - cpu) * 1000 / len(clients)
    subscribed, refused = await subscribe_all(clients)
    if on_subscribed is not None:
        await on_subscribed(subscribed)
    arrived = await asyncio.gather(*(c.wait_notification(1, timeout) for c in subscribed))
    result = StormResult(
        n=n,
        setup_failed=setup_failed,
        refused=refused,
        missing_notifications=arrived.count(False),
        evidence_expected=3 * n,
        evidence_missing=None,
        subscribers_left=None,
        setup_seconds=setup_seconds,
        seconds=0.0,
        setup_cpu_ms=setup_cpu_ms,
    )
    redis = None
    missing: set[_Record] = set()
    if redis_url:
        from redis.asyncio import Redis

        redis = Redis.from_url(redis_url)
        notified = {c.session_id for c in subscribed if c.session_id}
        refused_ids = {c.session_id for c in clients if c.session_id} - notified
        wanted = {(s, d, m) for s in notified for d, m in _EXPECTED}
        # A refused subscribe is still evidence: its initialize and its failed subscribe.
        wanted |= {(s, d, m) for s in refused_ids for d, m in _EXPECTED[:2]}
        # A session that failed its setup leaves nothing to look for: its records count
        # as missing (3 each).
        lost_setups = n - len(clients)
        result.evidence_expected = len(wanted) + 3 * lost_setups
        missing = await missing_evidence(redis, wanted)
        result.evidence_missing = len(missing) + 3 * lost_setups
    gate = asyncio.Semaphore(concurrency)  # as many new connections at once as in setup

    async def end(client: RawClient) -> bool:
        async with gate:
            return await client.end()

    ends = await asyncio.gather(*(end(c) for c in clients))
    result.end_failed = ends.count(False)
    if redis is not None:
        result.subscribers_left = await _subscribers_left(redis, ended, ends.count(True))
        if missing and result.evidence_missing is not None:  # still missing, or only late?
            result.evidence_late = len(missing) - len(await missing_evidence(redis, missing, 0))
            result.evidence_missing -= result.evidence_late
        result.evidence_counted_lost = await counted_lost(redis)
        await redis.aclose()
    result.seconds = time.perf_counter() - started
    return result


async def _subscribers_left(redis: Any, ended: Callable[[], int] | None, sessions: int) -> int:
    """SCARD of the subscriber set once the server has ended ``sessions`` sessions
    (``ended`` counts them, from its log), or after a bound (60 s, plus 40 ms a
    session). Without ``ended``: once the set has not changed for 5 s."""
    deadline = time.monotonic() + 60 + sessions * 0.04
    size, quiet = await redis.scard(SUBSCRIBERS_KEY), 0
    while time.monotonic() < deadline:
        if ended is not None and ended() >= sessions:
            return int(await redis.scard(SUBSCRIBERS_KEY))
        if ended is not None and time.monotonic() + 0.25 >= deadline:
            print(f"  only {ended()} of {sessions} sessions ended within the bound")
        if ended is None and (size == 0 or quiet >= 20):
            return int(size)
        # Session ends run after the DELETE replies; the server's log tells when.
        await asyncio.sleep(0.25)
        newer = await redis.scard(SUBSCRIBERS_KEY)
        quiet = quiet + 1 if newer == size else 0
        size = newer
    return int(await redis.scard(SUBSCRIBERS_KEY))


async def floor_storm(
    port: int, n: int, concurrency: int, timeout: float, pid: int, live_at_head: bool = False
) -> StormResult:
    """A storm without the lab's checks (the floor's, the peer's)."""
    return await storm(
        port,
        n,
        concurrency=concurrency,
        timeout=timeout,
        server_pid=pid,
        live_at_head=live_at_head,
    )


# ---------------------------------------------------------------- fan-out


async def fanout(
    port: int,
    n: int,
    redis_url: str,
    concurrency: int,
    timeout: float,
    *,
    on_subscribed: Callable[[list[RawClient]], Awaitable[None]] | None = None,
    receivers: list[int] | None = None,
) -> list[float]:
    """Latencies (s) from one publish to each of ``n`` subscribed sessions' notification.
    ``on_subscribed`` is awaited with the subscribed clients before the publish; the
    publish's receiver count (relays listening) is appended to ``receivers``."""
    from redis.asyncio import Redis

    clients, failed, _ = await setup_sessions(port, n, concurrency, name="fanout")
    subscribed, refused = await subscribe_all(clients)
    if failed or refused:
        print(f"  fan-out: {sum(failed.values())} setup failures, {sum(refused.values())} refused")
        for reason, count in (failed + refused).most_common(3):
            print(f"  {count} x {reason}")
    await asyncio.gather(*(c.wait_notification(1, 2.0) for c in subscribed))  # floor notifies now
    for client in subscribed:
        client.notifications.clear()
    if on_subscribed is not None:
        await on_subscribed(subscribed)
    redis = Redis.from_url(redis_url)
    version = 1_000_000 + int(time.time())
    body = json.dumps({"uri": STATUS_URI, "version": version})
    await redis.hset(f"mcp:state:shared:{STATUS_URI}", mapping={"version": version, "text": "x"})
    loop = asyncio.get_running_loop()
    published = loop.time()
    listening = await redis.publish(UPDATES_CHANNEL, body)
    if receivers is not None:
        receivers.append(int(listening))
    await redis.aclose()
    await asyncio.gather(*(c.wait_notification(1, timeout) for c in subscribed))
    latencies = [c.notifications[0][0] - published for c in subscribed if c.notifications]
    missing = len(subscribed) - len(latencies)
    if missing:
        print(f"  fan-out: {missing} notifications missing")
    await asyncio.gather(*(c.end() for c in clients))
    return latencies


# ---------------------------------------------------------------- reads/s


async def reads_per_second(
    port: int, pid: int, seconds: float, concurrency: int = 16
) -> tuple[float, float]:
    """resources/read on ONE session from ``concurrency`` connections for ``seconds``:
    reads per second, and the server's CPU milliseconds per read (process ``pid``;
    steadier than the rate on a machine other work shares)."""
    first = RawClient(HOST, port, name="reads")
    await first.initialize()
    workers = [first] + [first.clone() for _ in range(concurrency - 1)]
    done = 0
    failed = 0
    deadline = time.perf_counter() + seconds

    async def loop(client: RawClient) -> None:
        nonlocal done, failed
        while time.perf_counter() < deadline:
            reply = await client.request("resources/read", {"uri": STATUS_URI})
            if "result" in reply:
                done += 1
            else:
                failed += 1

    started, cpu = time.perf_counter(), cpu_seconds(pid)
    await asyncio.gather(*(loop(w) for w in workers))
    elapsed, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu
    for worker in workers[1:]:
        await worker.close()
    await first.end()
    if failed:
        print(f"  reads: {failed} failed")
    return done / elapsed, cpu * 1000 / max(done, 1)


# ---------------------------------------------------------------- memory


async def memory_per_session(
    port: int, pid: int, n: int, concurrency: int, redis_url: str | None
) -> tuple[float, float | None]:
    """KB per idle subscribed session (GET stream open, subscribed to the status
    resource): server RSS growth, Redis used_memory growth."""
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url) if redis_url else None
    before_rss = rss_kb(pid)
    before_redis = (await redis.info("memory"))["used_memory"] if redis else 0
    clients, _failed, _ = await setup_sessions(port, n, concurrency, name="memory")
    clients, _refused = await subscribe_all(clients)  # idle SUBSCRIBED sessions
    ready = len(clients)
    rss = (rss_kb(pid) - before_rss) / max(ready, 1)
    redis_kb = None
    if redis is not None:
        redis_kb = (
            ((await redis.info("memory"))["used_memory"] - before_redis) / 1024 / max(ready, 1)
        )
        await redis.aclose()
    await asyncio.gather(*(c.end() for c in clients))
    return rss, redis_kb


# ---------------------------------------------------------------- cold start


async def first_initialize(port: int, timeout: float = 60.0) -> float:
    """Seconds until an initialize on ``port`` succeeds (polled every 20 ms, bounded)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        client = RawClient(HOST, port, name="cold")
        try:
            await client.initialize()
            await client.end()
            return time.perf_counter() - started
        except _CLIENT_ERRORS:
            await client.close()
            await asyncio.sleep(0.02)  # nothing to await: the port is not open yet
    raise TimeoutError(f"no initialize on port {port} within {timeout}s")


def cold_start(code: Path, peer: Peer | None = None) -> tuple[float, float, float | None]:
    """Seconds from spawning ``mcp-lab up`` / the floor / the peer to their first
    initialize (no peer: None)."""
    port, redis_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
    env.pop("REDIS_URL", None)
    env.update(MCP_TEST_PORT=str(port), PYTHONUNBUFFERED="1")
    if HIDDEN:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_hiding_path(), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    lab = Proc(
        "up", [sys.executable, "-m", "services", "up", "--redis-port", str(redis_port)], code, env
    )
    try:
        asyncio.run(first_initialize(port))
        lab_seconds = time.perf_counter() - started
    finally:
        lab.stop()
    peer_seconds = None
    if peer is not None:
        peer_port = free_port()
        started = time.perf_counter()
        peer_proc = peer.spawn(peer_port, delay=3600)
        try:
            asyncio.run(first_initialize(peer_port))
            peer_seconds = time.perf_counter() - started
        finally:
            peer_proc.stop()
    floor_port = free_port()
    started = time.perf_counter()
    floor = Proc(
        "floor",
        [sys.executable, str(ROOT / "scripts" / "floor.py"), "--port", str(floor_port)],
        ROOT,
        dict(os.environ),
    )
    try:
        asyncio.run(first_initialize(floor_port))
        floor_seconds = time.perf_counter() - started
    finally:
        floor.stop()
    return lab_seconds, floor_seconds, peer_seconds


# ---------------------------------------------------------------- the run


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 if ordered else float("nan")


def ratio(lab: float, floor: float) -> str:
    return f"{lab / floor:.1f}x" if floor else "-"


def share(lab: float, peer: float) -> str:
    """The lab's figure divided by the peer's (>= 1: a rate at least the peer's)."""
    return f"{lab / peer:.2f}" if peer else "-"


@dataclass
class Row:
    """One line of the table. ``vs_floor``: the lab against the floor; with ``--peer``,
    ``peer`` is the peer's cell and ``vs_peer`` the lab's figure divided by it."""

    measure: str
    lab: str
    floor: str
    vs_floor: str = ""
    peer: str = "-"
    vs_peer: str = ""


def print_table(rows: list[Row], with_peer: bool) -> None:
    if with_peer:
        print("| measure | lab | peer | floor | lab / floor | lab / peer |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r.measure} | {r.lab} | {r.peer} | {r.floor} | {r.vs_floor} | {r.vs_peer} |")
        return
    print("| measure | lab | floor | lab / floor |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r.measure} | {r.lab} | {r.floor} | {r.vs_floor} |")


def main() -> None:
    parser = argparse.ArgumentParser(description="The lab under load, next to a bare floor.")
    parser.add_argument("--storm", type=int, default=1000, help="sessions in the storm")
    parser.add_argument("--fanout", type=int, default=500, help="sessions in the fan-out")
    parser.add_argument("--sessions", type=int, default=500, help="idle sessions for KB/session")
    parser.add_argument("--reads-seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=200, help="sessions set up at a time")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound of each wait")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout of the lab to run")
    parser.add_argument("--only", default="storm,late,fanout,reads,memory,cold")
    parser.add_argument(
        "--late", default="1000,5000", help="sizes of the lateness storms (comma-separated)"
    )
    parser.add_argument("--late-delay", type=float, default=2.0, help="update delay, seconds")
    parser.add_argument(
        "--lab-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra MCP_TEST_KEY=VALUE for the lab's processes",
    )
    parser.add_argument(
        "--without",
        default="",
        help="modules the lab must run without, comma-separated (e.g. uvloop,httptools)",
    )
    parser.add_argument(
        "--peer",
        type=Path,
        default=None,
        metavar="DIR",
        help="a built checkout of the peer TypeScript lab, measured beside the lab (a column)",
    )
    parser.add_argument("--peer-node", default="node", help="the node that runs the peer")
    parser.add_argument(
        "--client",
        choices=("raw", "aiohttp"),
        default="raw",
        help="the client of the reads phase (aiohttp: as issue 24 measured; pip install aiohttp)",
    )
    parser.add_argument(
        "--compose-replicas",
        default=None,
        metavar="N,M",
        help="storm and fan-out through the compose scale profile with N, then M, replicas",
    )
    args = parser.parse_args()
    extra = dict(s.split("=", 1) for s in args.lab_setting)
    if args.compose_replicas:
        import bench_replicas

        counts = bench_replicas.parse_counts(args.compose_replicas)
        print(f"compose scale profile, replicas {counts}  cores: {os.cpu_count()}")
        bench_replicas.run(counts, args, extra)
        return
    HIDDEN.extend(filter(None, args.without.split(",")))
    wanted = set(args.only.split(","))
    peer = None
    if args.peer is not None:
        peer = Peer(args.peer.resolve(), args.peer_node)
        peer.check()
    args.peer = peer
    from services.cli.embedded_redis import start_redis

    code = args.code.resolve()
    hidden = f"  without: {','.join(HIDDEN)}" if HIDDEN else ""
    print(f"lab code: {code}  cores: {os.cpu_count()}  load: {_load()}{hidden}")
    if peer is not None:
        print(f"peer: {peer.directory} (node {peer.version()})")
    rows: list[Row] = []
    redis_server = start_redis()
    try:
        if "storm" in wanted:
            rows += _storm_rows(code, redis_server.url, args, extra)
        if "late" in wanted:
            import bench_late

            rows += bench_late.rows(code, redis_server.url, args, extra)
        if "fanout" in wanted:
            rows += _fanout_rows(code, redis_server.url, args, extra)
        if "reads" in wanted or "memory" in wanted:
            rows += _reads_memory_rows(code, redis_server.url, args, extra, wanted)
    finally:
        redis_server.stop()
    if "cold" in wanted:
        lab_s, floor_s, peer_s = cold_start(code, peer)
        rows.append(
            Row(
                "cold start to first initialize",
                f"{lab_s:.2f} s",
                f"{floor_s:.2f} s",
                ratio(lab_s, floor_s),
                *_peer_cells(peer_s, lab_s, "{:.2f} s"),
            )
        )
    print(f"load at the end: {_load()}")
    print()
    print_table(rows, peer is not None)


def _load() -> str:
    """The load averages (1, 5, 15 min): every figure of a run is read beside them."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _peer_cells(peer: float | None, lab: float, form: str) -> tuple[str, str]:
    """The peer's cell and the lab's figure divided by it ("-" without a peer)."""
    return ("-", "") if peer is None else (form.format(peer), share(lab, peer))


def _flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()


def _storm_rows(code: Path, url: str, args: argparse.Namespace, extra: dict[str, str]) -> list[Row]:
    _flush(url)
    port = free_port()
    procs = start_lab(code, url, port, True, update_delay_seconds="0", **extra)
    try:
        lab = asyncio.run(
            storm(
                port,
                args.storm,
                redis_url=url,
                concurrency=args.concurrency,
                timeout=args.timeout,
                server_pid=procs[0].process.pid,
                ended=lambda: procs[0].count(SESSION_ENDED),
            )
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
    print(lab.summary())
    peer = None
    if args.peer is not None:
        peer_proc = args.peer.start(free_port(), delay=0)
        try:
            peer = asyncio.run(
                floor_storm(
                    peer_proc.port, args.storm, args.concurrency, args.timeout, peer_proc.pid, True
                )
            )
        finally:
            peer_proc.stop()
        print("peer " + peer.summary())
    floor_port = free_port()
    floor_proc = start_floor(floor_port)
    try:
        floor = asyncio.run(
            floor_storm(
                floor_port, args.storm, args.concurrency, args.timeout, floor_proc.process.pid
            )
        )
    finally:
        floor_proc.stop()
    print("floor " + floor.summary())
    n = args.storm

    def refused(r: StormResult) -> int:
        return sum(r.refused.values()) + sum(r.setup_failed.values())

    rate, cpu = lab.sessions_per_second, lab.setup_cpu_ms or 0
    return [
        Row(
            f"storm {n}: refused subscribes",
            str(refused(lab)),
            str(refused(floor)),
            peer="-" if peer is None else str(refused(peer)),
        ),
        Row(
            f"storm {n}: missing notifications",
            str(lab.missing_notifications),
            str(floor.missing_notifications),
            peer="-" if peer is None else str(peer.missing_notifications),
        ),
        Row(
            f"storm {n}: evidence records missing (of {lab.evidence_expected})",
            f"{lab.evidence_missing}{lab.evidence_notes()}",
            "-",
        ),
        Row(
            f"storm {n}: subscribers left after the sessions ended", str(lab.subscribers_left), "-"
        ),
        Row(
            f"storm {n}: setup sessions/s",
            f"{rate:.0f}",
            f"{floor.sessions_per_second:.0f}",
            ratio(floor.sessions_per_second, rate) + " slower",
            *_peer_cells(None if peer is None else peer.sessions_per_second, rate, "{:.0f}"),
        ),
        Row(
            f"storm {n}: server CPU ms per session set up",
            f"{cpu:.2f}",
            f"{floor.setup_cpu_ms or 0:.3f}",
            ratio(cpu, floor.setup_cpu_ms or 0),
            *_peer_cells(None if peer is None else peer.setup_cpu_ms or 0, cpu, "{:.2f}"),
        ),
    ]


def _fanout_rows(
    code: Path, url: str, args: argparse.Namespace, extra: dict[str, str]
) -> list[Row]:
    _flush(url)
    port = free_port()
    # No updater: the benchmark publishes the update itself, once.
    procs = start_lab(
        code, url, port, False, state_scope="shared", update_delay_seconds="3600", **extra
    )
    try:
        lab = asyncio.run(fanout(port, args.fanout, url, args.concurrency, args.timeout))
    finally:
        for proc in procs:
            proc.stop()
    floor_port = free_port()
    floor_proc = start_floor(floor_port, url)
    try:
        floor = asyncio.run(fanout(floor_port, args.fanout, url, args.concurrency, args.timeout))
    finally:
        floor_proc.stop()
    n = args.fanout
    # The peer has no shared update to fan out (one timer per session): its cells stay "-".
    rows = []
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        a, b = pct(lab, q), pct(floor, q)
        rows.append(
            Row(
                f"fan-out {n}: {name} publish to notification",
                f"{a:.1f} ms",
                f"{b:.1f} ms",
                ratio(a, b),
            )
        )
    rows.append(Row(f"fan-out {n}: notifications received", str(len(lab)), str(len(floor))))
    return rows


def _reads_memory_rows(
    code: Path, url: str, args: argparse.Namespace, extra: dict[str, str], wanted: set[str]
) -> list[Row]:
    """Reads (lab, then peer, then floor, one after the other), then memory per idle
    session (lab and floor). The peer's memory is left out: the RSS growth of its
    garbage-collected V8 heap over the sessions went from +30 to -50 KB per session
    between two runs (the reads' garbage given back, or a fresh process warming up)."""
    _flush(url)
    port = free_port()
    procs = start_lab(code, url, port, False, update_delay_seconds="3600", **extra)
    floor_port = free_port()
    floor_proc = start_floor(floor_port)
    peer = args.peer.start(free_port(), delay=3600) if args.peer is not None else None
    rows = []
    try:
        if "reads" in wanted:
            seconds = args.reads_seconds
            reads = reads_per_second
            if args.client == "aiohttp":
                import bench_aiohttp

                reads = bench_aiohttp.reads_per_second
            lab, lab_cpu = asyncio.run(reads(port, procs[0].process.pid, seconds))
            peer_reads: tuple[float, float] | tuple[None, None] = (None, None)
            if peer is not None:
                peer_reads = asyncio.run(reads(peer.port, peer.pid, seconds))
            floor, floor_cpu = asyncio.run(reads(floor_port, floor_proc.process.pid, seconds))
            client = " (aiohttp client)" if args.client == "aiohttp" else ""
            rows.append(
                Row(
                    f"reads/s, one session, concurrency 16{client}",
                    f"{lab:.0f}",
                    f"{floor:.0f}",
                    ratio(floor, lab) + " slower",
                    *_peer_cells(peer_reads[0], lab, "{:.0f}"),
                )
            )
            rows.append(
                Row(
                    "server CPU ms per read",
                    f"{lab_cpu:.2f}",
                    f"{floor_cpu:.3f}",
                    ratio(lab_cpu, floor_cpu),
                    *_peer_cells(peer_reads[1], lab_cpu, "{:.3f}"),
                )
            )
        if "memory" in wanted:
            n = args.sessions
            rss, redis_kb = asyncio.run(
                memory_per_session(port, procs[0].process.pid, n, args.concurrency, url)
            )
            floor_rss, _ = asyncio.run(
                memory_per_session(floor_port, floor_proc.process.pid, n, args.concurrency, None)
            )
            rows.append(
                Row(
                    f"KB per idle session ({n}), server RSS",
                    f"{rss:.1f}",
                    f"{floor_rss:.1f}",
                    ratio(rss, floor_rss),
                )
            )
            rows.append(
                Row(
                    f"KB per idle session ({n}), Redis used_memory",
                    f"{redis_kb:.1f}" if redis_kb is not None else "-",
                    "0",
                )
            )
    finally:
        if peer is not None:
            peer.stop()
        floor_proc.stop()
        for proc in procs:
            proc.stop()
    return rows


if __name__ == "__main__":
    main()
