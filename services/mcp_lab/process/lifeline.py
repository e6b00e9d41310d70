"""Children of ``mcp-lab up`` end when it ends, however it ends (SIGKILL included).

Two mechanisms, the second a fallback for the first:

- on Linux, each child is spawned with a parent-death signal
  (``prctl(PR_SET_PDEATHSIG, SIGTERM)`` between fork and exec): the kernel sends
  it SIGTERM when the thread that spawned it dies. ``up`` spawns its children
  from its main thread, so that is when ``up`` itself dies;
- the lab's own Python children (server, updater) are told ``up``'s pid in
  ``MCP_LAB_UP_PID`` and watch their parent: once it is no longer ``up`` (they
  were re-parented, ``up`` is gone) they send themselves SIGTERM.

What still survives (another OS, a child that ignores SIGTERM) is named in the
runtime file (:mod:`mcp_lab.cli.runtime`), and the next ``up`` stops it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

PARENT_PID_ENV = "MCP_LAB_UP_PID"
_PR_SET_PDEATHSIG = 1
_WATCH_SECONDS = 0.5


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _load_prctl()


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` giving the child ``sig`` when the calling thread dies.

    None where the OS has no parent-death signal (then only the runtime file and
    the parent watch of :func:`watch_parent` remain).
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()
    args = (ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(int(sig)), *[ctypes.c_ulong(0)] * 3)

    def arm() -> None:  # runs in the child, between fork and exec: keep it tiny
        prctl(*args)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def watch_parent() -> None:
    """In a child of ``mcp-lab up``: SIGTERM this process when ``up`` is gone.

    Does nothing unless ``MCP_LAB_UP_PID`` names this process's parent.
    """
    expected = os.environ.get(PARENT_PID_ENV, "")
    if not expected.isdigit() or os.getppid() != int(expected):
        return
    parent = int(expected)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_SECONDS)
        with contextlib.suppress(OSError, ValueError):  # stderr was up's pipe: likely closed
            print(f"[lab] mcp-lab up (pid {parent}) is gone; stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-up", daemon=True).start()
