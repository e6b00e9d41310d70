"""Sessions of the raw client: set up many at once, subscribe them all at once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from rawmcp import STATUS_URI, HttpError, RawClient

from bench.procs import HOST

_CLIENT_ERRORS = (OSError, HttpError, asyncio.IncompleteReadError, TimeoutError, ValueError)


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
