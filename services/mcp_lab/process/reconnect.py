"""One reconnect-and-backoff loop, for the long-running Redis work of relay and updater.

Both run until cancelled and must outlive any error: a lost Redis connection (a
warning, then a retry after a pause that doubles up to a cap) or a bug (a
traceback, then a restart after the same pause). The pause goes back to its
start once the work says it is connected again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

FIRST_PAUSE_SECONDS = 0.2


def stop_if_cancelled() -> None:
    """Raise CancelledError if this task was asked to stop. Python 3.11's
    ``asyncio.wait_for``, which redis-py uses to send each command, can swallow a
    cancellation that arrives just as the send completes; the task still counts it,
    and a loop that never checks would then run on forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def keep_running(
    work: Callable[[Callable[[], None]], Awaitable[None]],
    *,
    logger: logging.Logger,
    tag: str,
    max_pause_seconds: float,
    on_error: Callable[[], None] = lambda: None,
) -> None:
    """Run ``work(connected)`` again and again until cancelled. ``work`` calls
    ``connected()`` once it is working (the pause starts over); when it raises,
    ``on_error()`` runs, one line is logged under ``[tag]`` and the loop pauses."""
    pause = FIRST_PAUSE_SECONDS

    def connected() -> None:
        nonlocal pause
        pause = FIRST_PAUSE_SECONDS

    while True:
        stop_if_cancelled()
        try:
            await work(connected)
        except Exception as exc:
            on_error()
            if isinstance(exc, (RedisError, OSError)):
                logger.warning("[%s] redis unavailable (%s); retrying in %.1fs", tag, exc, pause)
            else:
                logger.exception("[%s] unexpected error; restarting in %.1fs", tag, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, max_pause_seconds)
