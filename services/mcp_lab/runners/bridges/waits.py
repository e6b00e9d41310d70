"""A line while a bridge's run waits: what it waits for, every
:data:`~mcp_lab.runners.phases.HEARTBEAT_SECONDS` seconds (15) while one wait lasts, so
no wait of a run is silent for longer (a slow bridge, a slow lab, a long flow)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from mcp_lab.runners.phases import HEARTBEAT_SECONDS

Say = Callable[[str], None]


class Waits:
    """What one run waits for now (:meth:`now`), said while :meth:`beating` runs."""

    def __init__(self, say: Say, label: str, every: float = HEARTBEAT_SECONDS) -> None:
        self.say, self.label, self.every = say, label, every
        self.what, self.since = "starting the lab", time.monotonic()

    def now(self, what: str) -> None:
        """The run waits for ``what`` from now on (its own clock starts)."""
        self.what, self.since = what, time.monotonic()

    def line(self) -> str:
        return f"{self.label}: {self.what}: {time.monotonic() - self.since:.0f} s so far"

    @asynccontextmanager
    async def beating(self) -> AsyncIterator[Waits]:
        """Say :meth:`line` each time one wait has lasted another ``every`` seconds."""

        async def beat() -> None:
            while True:
                waited = time.monotonic() - self.since
                await asyncio.sleep(self.every - waited % self.every)
                if time.monotonic() - self.since >= self.every - 0.05:
                    self.say(self.line())

        task = asyncio.create_task(beat())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
