"""What a probe run says: the exit codes that name its first failure, the step lines
it prints on stdout (one JSON object per line, ``STEPS`` in order for a run that
works), the progress lines on stderr while it waits, and :class:`ProbeFailed` with the
reason a failure gives (:func:`failure_in`, :func:`reason`). The flow that says them is
:class:`mcp_lab.runners.probe.Probe`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp.shared.exceptions import MCPError

OK, UNREACHABLE, NOT_FOUND, SUBSCRIBE_REFUSED, NO_NOTIFICATION, PROTOCOL_ERROR = 0, 3, 4, 5, 6, 7
# Every step line, in order, of a run that works (then a "summary" line).
STEPS = (
    "capabilities",
    "resource",
    "initial_content",
    "subscribed",
    "notification_received",
    "final_content",
    "unsubscribed",
)


class ProbeFailed(Exception):
    def __init__(self, code: int, step: str, message: str) -> None:
        super().__init__(message)
        self.code, self.step, self.message = code, step, message


def emit(step: str, **fields: Any) -> None:
    """One JSON line on stdout. If the reader went away (``| head``), go on silently."""
    try:
        print(json.dumps({"step": step, **fields}, default=str), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# While the probe waits for the notification: a line on stderr at once and then every
# so often, so that a long --timeout is never silent (stdout stays JSON lines only).
PROGRESS_SECONDS = 10.0


def progress(text: str) -> None:
    print(f"mcp-lab probe: {text}", file=sys.stderr, flush=True)


@asynccontextmanager
async def waiting(
    what: str,
    timeout: float,
    every: float = PROGRESS_SECONDS,
    say: Callable[[str], None] = progress,
) -> AsyncIterator[None]:
    """Say that the probe waits for ``what`` (at most ``timeout`` s), and every ``every``
    seconds how long it has waited, until the block ends."""
    started = time.monotonic()
    say(f"waiting for {what} (up to {timeout:g} s)")

    async def tick() -> None:
        while True:
            await anyio.sleep(every)
            say(f"still waiting for {what} ({time.monotonic() - started:.0f} s)")

    async with anyio.create_task_group() as ticking:
        ticking.start_soon(tick)
        try:
            yield
        finally:
            ticking.cancel_scope.cancel()


Step = Callable[..., None]  # (step name, **fields), like :func:`emit`


def failure_in(exc: BaseException) -> ProbeFailed | None:
    if isinstance(exc, ProbeFailed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := failure_in(inner)) is not None:
                return found
    if isinstance(exc, (httpx2.HTTPError, OSError)):
        return ProbeFailed(UNREACHABLE, "connect", reason(exc))
    return None


def reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"JSON-RPC error {exc.error.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}"
