"""Where the time of a run goes, and a line while it goes.

A run's phases, in order: ``lab start`` (Redis, server, updater), ``client start``
(from launching the client to its first initialize at the lab), ``scenario`` (from
there to the first update applied), ``observe`` (from the update to the client's end),
``teardown`` (the evidence read, the files kept, the lab stopped). A phase that never
began (a client that never connected) counts in the one before it. While a phase lasts,
the run says so every :data:`HEARTBEAT_SECONDS` seconds: no wait is silent for longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

LAB_START, CLIENT_START, SCENARIO = "lab start", "client start", "scenario"
OBSERVE, TEARDOWN = "observe", "teardown"
PHASES = (LAB_START, CLIENT_START, SCENARIO, OBSERVE, TEARDOWN)
HEARTBEAT_SECONDS = 15.0


class Clock:
    """The phases of one run (see the module docstring), marked as they begin."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, float]] = [(LAB_START, time.monotonic())]
        self._ended: float | None = None

    @property
    def phase(self) -> str:
        return self._marks[-1][0]

    def since(self) -> float:
        """Seconds the current phase has lasted."""
        return time.monotonic() - self._marks[-1][1]

    def mark(self, phase: str) -> None:
        """``phase`` begins now, unless it (or one after it) already began."""
        if PHASES.index(phase) > PHASES.index(self.phase):
            self._marks.append((phase, time.monotonic()))

    def end(self) -> None:
        self._ended = time.monotonic()

    def durations(self) -> dict[str, float]:
        """Seconds per phase (rounded to 0.1), in order; every phase named."""
        ends = [at for _, at in self._marks[1:]] + [self._ended or time.monotonic()]
        marks = zip(self._marks, ends, strict=True)
        spent = {name: round(end - at, 1) for (name, at), end in marks}
        return {name: spent.get(name, 0.0) for name in PHASES}


@asynccontextmanager
async def heartbeat(
    clock: Clock, say: Callable[[str], None], label: str, every: float = HEARTBEAT_SECONDS
) -> AsyncIterator[Clock]:
    """``say`` where ``clock`` is, every ``every`` seconds, while the block runs."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            say(f"{label}: {clock.phase} ({clock.since():.0f} s so far)")

    task = asyncio.create_task(beat())
    try:
        yield clock
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        clock.end()
