"""A runner's command under Ctrl-C: what was finished is kept, the rest stops at once.

:func:`run_until_interrupted` runs a runner's main coroutine. The first Ctrl-C (SIGINT)
says one line and cancels it: the runs under way stop their clients, bridges and labs
(:meth:`mcp_lab.runners.program.Process.stop` hurries when its task is being
cancelled), and the command goes on to print and keep the rows finished so far. A
second Ctrl-C leaves at once; the children then end with the runner (Linux's
parent-death signal, :mod:`mcp_lab.process.lifeline`).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")
INTERRUPTED_EXIT = 130


def run_until_interrupted(
    main: Coroutine[Any, Any, T], say: Callable[[str], None]
) -> tuple[T | None, bool]:
    """Run ``main`` to its end: ``(its result, False)``; or, after a Ctrl-C, ``(None,
    True)`` once it has stopped. ``say``: where the one line of a Ctrl-C goes."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(main)
    interrupted = False

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: leave now
            raise KeyboardInterrupt
        interrupted = True
        say("interrupted: stopping the runs under way (Ctrl-C again to leave at once)")
        loop.call_soon_threadsafe(task.cancel)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        try:
            return loop.run_until_complete(task), False
        except asyncio.CancelledError:
            if not interrupted:
                raise
            return None, True
        finally:
            _close(loop)
    finally:
        signal.signal(signal.SIGINT, previous)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """End what is left on ``loop`` (as :func:`asyncio.run` does) and close it."""
    try:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
