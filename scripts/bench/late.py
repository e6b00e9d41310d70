"""The lateness phase of scripts/bench: is each notification sent when it is due?

``late N``: N sessions set up (initialize, GET stream), then all subscribe at the
same moment, in per-session scope, with an update delay D (2 s by default). A
session's notification is due D seconds after the lab took its subscribe, a moment
the client cannot see: it lies between the subscribe being sent and its answer
arriving (under a burst the answers themselves come late). So the benchmark
measures, per session, notification arrival minus (that moment + D) from both ends:
"from the answer" errs towards the lab, "from the request" against it. It prints
p50, p99, max, and the notifications missing 30 s after due. The floor
(scripts/floor.py --delay D) does the same with a timer per subscribe, and so does
the peer lab with ``--peer`` (scripts/bench/peer.py, its update delay D). For the lab
it also reads the lab's own figure from the evidence: per notification record,
sent (``ts``) minus due (``due``), which is what the report shows as the lab's
lateness.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from rawmcp import STATUS_URI, RawClient

from bench.procs import free_port, start_floor, start_lab
from bench.rows import _flush
from bench.sessions import _CLIENT_ERRORS, setup_sessions
from bench.table import Row, pct

# A notification not there this long after it was due counts as missing.
MISSING_AFTER_SECONDS = 30.0


@dataclass
class LateResult:
    """One lateness run: per notification, seconds after due (client side)."""

    n: int
    set_up: int
    subscribed: int
    lateness: list[float] = field(default_factory=list)  # from the subscribe's answer
    from_request: list[float] = field(default_factory=list)  # from the subscribe sent
    missing: int = 0
    lab_lateness: list[float] = field(default_factory=list)  # sent minus due, from evidence

    def summary(self, name: str) -> str:
        def figures(samples: list[float]) -> str:
            if not samples:
                return "no samples"
            p50, p99 = pct(samples, 0.5) / 1000, pct(samples, 0.99) / 1000
            return f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {max(samples):.2f} s"

        text = (
            f"{name} late {self.n}: set up {self.set_up}, subscribed {self.subscribed}, "
            f"missing {self.missing}; after due, from the answer: {figures(self.lateness)}; "
            f"from the request: {figures(self.from_request)}"
        )
        if self.lab_lateness:
            text += f"; the lab's own (sent - due): {figures(self.lab_lateness)}"
        return text


async def _subscribe_timed(clients: list[RawClient]) -> list[tuple[RawClient, float, float]]:
    """Every client subscribes at the same moment: the accepted ones, each with the
    (event loop) times its request was sent and its answer arrived."""
    loop = asyncio.get_running_loop()

    async def one(client: RawClient) -> tuple[float, float] | None:
        sent = loop.time()
        try:
            reply = await client.request("resources/subscribe", {"uri": STATUS_URI})
        except _CLIENT_ERRORS:
            return None
        return None if "error" in reply else (sent, loop.time())

    times = await asyncio.gather(*(one(c) for c in clients))
    return [(c, *t) for c, t in zip(clients, times, strict=True) if t is not None]


async def late(
    port: int,
    n: int,
    delay: float,
    concurrency: int,
    redis_url: str | None = None,
    live_at_head: bool = False,
) -> LateResult:
    """Storm ``n`` with an update delay of ``delay`` s: each notification's lateness.
    ``live_at_head``: see ``bench.sessions.setup_sessions``."""
    clients, _, _ = await setup_sessions(
        port, n, concurrency, name="late", live_at_head=live_at_head
    )
    result = LateResult(n=n, set_up=len(clients), subscribed=0)
    try:
        subscribed = await _subscribe_timed(clients)
        result.subscribed = len(subscribed)
        loop = asyncio.get_running_loop()

        async def wait(client: RawClient, sent: float, answered: float) -> float | None:
            bound = answered + delay + MISSING_AFTER_SECONDS - loop.time()
            if not await client.wait_notification(1, max(0.0, bound)):
                return None
            return client.notifications[0][0] - delay

        arrived = await asyncio.gather(*(wait(*one) for one in subscribed))
        for (_, sent, answered), at in zip(subscribed, arrived, strict=True):
            if at is None:
                result.missing += 1
            else:
                result.lateness.append(at - answered)
                result.from_request.append(at - sent)
        if redis_url:
            sessions = {c.session_id for c, _, _ in subscribed if c.session_id}
            result.lab_lateness = await lab_lateness(redis_url, sessions)
    finally:
        gate = asyncio.Semaphore(concurrency)

        async def end(client: RawClient) -> None:
            async with gate:
                await client.end()

        await asyncio.gather(*(end(c) for c in clients))
    return result


async def lab_lateness(redis_url: str, sessions: set[str]) -> list[float]:
    """The lab's own lateness of each notification to ``sessions``: the record's
    ``ts`` minus its ``due`` (records without ``due`` are left out), in seconds.
    Waits (bounded) for the records: the lab writes them in batches."""
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url)
    found: dict[str, float] = {}
    after = "-"
    deadline = time.monotonic() + 30
    try:
        while len(found) < len(sessions) and time.monotonic() < deadline:
            entries: Any = await redis.xrange("mcp:events", min=after, count=5000)
            for entry_id, fields in entries:
                after = f"({entry_id.decode()}"
                f = {k.decode(): v.decode() for k, v in fields.items()}
                if f.get("direction") == "out" and f.get("session") in sessions and "due" in f:
                    found.setdefault(f["session"], (int(f["ts"]) - int(f["due"])) / 1000)
            if not entries:
                await asyncio.sleep(0.5)  # polling a stream the lab writes in batches
    finally:
        await redis.aclose()
    return list(found.values())


def _both(result: LateResult, q: float) -> str:
    answer, request = (pct(s, q) / 1000 for s in (result.lateness, result.from_request))
    return f"{answer:.2f} / {request:.2f} s"


def rows(code: Any, url: str, args: Any, extra: dict[str, str]) -> list[Row]:
    """The table rows of ``--only late``: per size in ``--late``, lab, peer (with
    ``--peer``: its timer per session) and floor."""
    out: list[Row] = []
    delay = args.late_delay
    for n in (int(s) for s in args.late.split(",") if s):
        _flush(url)
        port = free_port()
        procs = start_lab(code, url, port, True, update_delay_seconds=str(delay), **extra)
        try:
            lab = asyncio.run(late(port, n, delay, args.concurrency, url))
        finally:
            for proc in reversed(procs):
                proc.stop()
        print(lab.summary("lab"))
        peer = None
        if args.peer is not None:
            peer_proc = args.peer.start(free_port(), delay=delay)
            try:
                peer = asyncio.run(
                    late(peer_proc.port, n, delay, args.concurrency, live_at_head=True)
                )
            finally:
                peer_proc.stop()
            print(peer.summary("peer"))
        floor_port = free_port()
        floor_proc = start_floor(floor_port, delay=delay)
        try:
            floor = asyncio.run(late(floor_port, n, delay, args.concurrency))
        finally:
            floor_proc.stop()
        print(floor.summary("floor"))
        name = f"late {n} (delay {delay:g} s)"
        out.append(
            Row(
                f"{name}: missing 30 s after due",
                str(lab.missing),
                str(floor.missing),
                peer="-" if peer is None else str(peer.missing),
            )
        )
        for label, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
            out.append(
                Row(
                    f"{name}: {label} after due (from answer / from request)",
                    _both(lab, q),
                    _both(floor, q),
                    peer="-" if peer is None else _both(peer, q),
                )
            )
        if lab.lab_lateness:
            own = lab.lab_lateness
            out.append(
                Row(
                    f"{name}: the lab's own p99 / max (sent - due)",
                    f"{pct(own, 0.99) / 1000:.2f} s / {max(own):.2f} s",
                    "-",
                )
            )
    return out
