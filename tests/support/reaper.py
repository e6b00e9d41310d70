"""No process outlives the test that started it, even one that timed out.

Each pytest worker becomes a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a
process whose parent dies is handed to the worker, not to init, so it stays findable
among the worker's descendants. conftest.py notes the worker's descendants once a
system test's setup is done (what wider-scoped fixtures started stays theirs) and,
after its teardown, kills every descendant that appeared since and is still running:
the leftovers of a test that timed out, or of a command killed mid-run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
_REAP_SECONDS = 2.0


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where it cannot be."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return bool(prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] not in ("Z", "X"):  # a zombie is gone already
                parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(root: int | None = None) -> set[int]:
    """The running processes below ``root`` (this process by default)."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200] or "?"


def kill_new(before: set[int]) -> list[str]:
    """SIGKILL every descendant not in ``before``; their command lines."""
    left = descendants() - before
    named = [f"{pid} {command_of(pid)}" for pid in sorted(left)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _REAP_SECONDS
    waiting = set(left)
    while waiting and time.monotonic() < deadline:  # reap the ones handed to this process
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours to reap (its parent's), or reaped
                done = pid
            if done:
                waiting.discard(pid)
        if waiting:
            time.sleep(0.01)
    return named
