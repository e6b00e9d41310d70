"""A folder of its own for each invocation of a runner, under its cache's ``runs``.

Every ``mcp-lab clients run``, ``clients sweep`` and ``bridges run`` keeps its runs'
files (logs, evidence, wires) in ``<cache>/runs/<UTC stamp>-<pid>/`` (``-2``, ``-3``...
after it when one process starts two in the same second), so that invocations side by
side (two developers' runs, a CI run beside one's own) never write over each other's
files, and the folders a history row names stay that run's. The installs beside
``runs`` stay shared. ``MCP_LAB_RUNS`` moves the run folders of both runners away from
the caches (``$MCP_LAB_RUNS/clients``, ``$MCP_LAB_RUNS/bridges``: :func:`runs_of`), the
installs staying where they are: the test suite keeps its runs in its own temporary
folder so, and a CI job may keep them with its artifacts.

An invocation holds its folder's lock file (``.running``, an exclusive ``flock``) from
when it starts until it ends; the system lets it go when the process dies, however it
dies. As it starts, an invocation removes the folders of older invocations beyond the
newest :data:`KEPT_INVOCATIONS` (its own counted), except those whose lock is held: a
run still going keeps its folder. Only folders named as invocations are touched.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

# Invocation folders kept in one cache's ``runs`` (older ones are removed as a new one
# starts; a run still going never is).
KEPT_INVOCATIONS = 20
RUNNING = ".running"  # the lock file an invocation holds while it runs
RUNS_ENV = "MCP_LAB_RUNS"
_NAME = re.compile(r"\d{8}T\d{6}Z-\d+(-\d+)?")


def runs_of(runner: str, cache: Path) -> Path:
    """Where ``runner`` (``clients``, ``bridges``) keeps its invocations' folders:
    ``$MCP_LAB_RUNS/<runner>`` when that is set, else ``runs`` in its ``cache``, beside
    its installs."""
    moved = os.environ.get(RUNS_ENV, "")
    return Path(moved).expanduser() / runner if moved else cache / "runs"


def run_dir(runs: Path, name: str, version: str, parts: tuple[str, ...]) -> Path:
    """Where one run of ``name@version`` keeps its files, in ``runs`` (its invocation's
    folder): a folder per program version, then the plan's own ``parts`` (a client's
    scenario, setup and script; a bridge's direction and scenario)."""
    return runs.joinpath(f"{name}-{version}", *parts)


@contextmanager
def invocation(runs: Path, kept: int = KEPT_INVOCATIONS) -> Iterator[Path]:
    """A new folder under ``runs`` for this invocation's runs, held as running until the
    block ends (and removed then if no run kept a file in it); older invocations'
    folders beyond the newest ``kept`` (this one counted) are removed first, unless
    they are running."""
    runs.mkdir(parents=True, exist_ok=True)
    folder = _new_folder(runs)
    lock = os.open(folder / RUNNING, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # A file just made, that no one else has opened: taken at once.
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        prune(runs, kept)
        yield folder
    finally:
        if [p.name for p in folder.iterdir()] == [RUNNING]:  # no run kept a file: no folder
            shutil.rmtree(folder, ignore_errors=True)
        os.close(lock)  # lets the lock go


def invocations(runs: Path) -> list[Path]:
    """The invocation folders under ``runs``, oldest first."""
    if not runs.is_dir():
        return []
    found = (p for p in runs.iterdir() if _NAME.fullmatch(p.name) and p.is_dir())
    return sorted(found, key=lambda p: p.name)


def prune(runs: Path, kept: int = KEPT_INVOCATIONS) -> list[Path]:
    """Remove the invocation folders under ``runs`` older than the newest ``kept``,
    except those still running; returns the ones removed."""
    found = invocations(runs)
    older = found[: max(0, len(found) - kept)]
    return [folder for folder in older if _remove_unless_running(folder)]


def _remove_unless_running(folder: Path) -> bool:
    """Remove ``folder`` holding its lock (so that no one takes it as running meanwhile);
    False when its invocation runs. A folder without a lock file (half made, or half
    removed by another invocation's pruning) is older than the newest kept, and
    removed."""
    try:
        lock = os.open(folder / RUNNING, os.O_RDWR)
    except FileNotFoundError:
        shutil.rmtree(folder, ignore_errors=True)
        return True
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return False
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(lock)
    return True


def _new_folder(runs: Path) -> Path:
    base = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"
    for n in itertools.count(1):
        folder = runs / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise AssertionError("itertools.count never ends")
