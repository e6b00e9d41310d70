"""The storm: N sessions set up, then all subscribe at once; what was refused or lost."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rawmcp import STATUS_URI, RawClient

from bench.procs import cpu_seconds
from bench.sessions import setup_sessions, subscribe_all
from mcp_lab.process.writer import BATCH_TIMEOUT_SECONDS

EVENTS_STREAM = "mcp:events"
SUBSCRIBERS_KEY = f"mcp:subscribers:{STATUS_URI}"


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
# (mcp_lab.process.writer.BATCH_TIMEOUT_SECONDS). By then every write it had begun is in
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
    from mcp_lab.evidence.reader import lost_between

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
