#!/usr/bin/env python3
"""Benchmark: the time to a verdict, each row beside its floor.

Runs ``mcp-lab clients run`` (the clients and scenarios given, every transport unless
``--transport``), then measures each client's own start-up bare (its ``--version``,
the median of three) and prints, per row, its time beside its floor:

    floor = start-up x the client's launches in the row (a scored run's two turns,
            a pull run's one) + the scenario's timeline and the observe window (the
            scored run waits them out)

and whether the row is within the target (1.5 x floor + 5 s), its phases summed over
its runs, and the whole run's wall time beside the 5 min target of the pinned matrix.

    .venv/bin/python scripts/bench_clients.py [--client NAME]... [--scenario NAME]...
        [--transport http|stdio] [--jobs N] [--json FILE]

Every phase is bounded by the runner's own timeouts; nothing here waits without one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_lab.runners.clients.pins import CLIENTS  # noqa: E402
from mcp_lab.runners.install import CLIENTS_CACHE, cache_dir  # noqa: E402
from mcp_lab.scenarios import registry  # noqa: E402

OBSERVE_SECONDS = 6.0  # the runner's default --observe
TARGET_RATIO, TARGET_SLACK = 1.5, 5.0
MATRIX_TARGET_SECONDS = 300.0
_VERSION_TIMEOUT = 60.0


def bare_startup(name: str, version: str) -> float | None:
    """Seconds the installed client takes to print its version (median of 3)."""
    spec = CLIENTS.get(name)
    if spec is None or spec.source != "npm":
        return None
    prefix = cache_dir(CLIENTS_CACHE) / f"{name}-{version}" / "node_modules" / ".bin"
    binary = prefix / spec.binary
    if not binary.exists():
        return None
    path = [str(prefix)]
    if spec.needs_node22:
        path.insert(0, str(next(cache_dir(CLIENTS_CACHE).glob("node-*/node_modules/.bin"), prefix)))
    env = {**os.environ, "PATH": os.pathsep.join([*path, os.environ["PATH"]])}
    samples = []
    for _ in range(3):
        started = time.monotonic()
        subprocess.run([str(binary), "--version"], env=env, capture_output=True,
                       timeout=_VERSION_TIMEOUT, check=False)  # fmt: skip
        samples.append(time.monotonic() - started)
    return statistics.median(samples)


def floor_of(row: dict, startup: float) -> float:
    """The row's floor (see the module docstring)."""
    scenario = registry.get(row["scenario"])
    window = OBSERVE_SECONDS + max((a.after for a in scenario.timeline), default=0.0)
    launches = 0
    for run in row["runs"]:
        launches += 2 if run == "scored" else 1
    if row["client"] == "inspector":  # mcpdo: connect, read, subscribe, stop (+ reads)
        launches = 4 * len(row["runs"])
    return launches * startup + window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", action="append", default=[])
    parser.add_argument("--scenario", action="append", default=[])
    parser.add_argument("--transport", choices=["http", "stdio"], default=None)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="keep the rows there")
    args = parser.parse_args()
    command = [sys.executable, "-m", "mcp_lab", "clients", "run", "--format", "json"]
    command += [a for name in args.client for a in ("--client", name)]
    command += [a for name in args.scenario for a in ("--scenario", name)]
    command += ["--transport", args.transport] if args.transport else []
    command += ["--jobs", str(args.jobs)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    rows = [r for r in json.loads(done.stdout)["clients"] if r["scenario"] != "-"]
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    startups = {(r["client"], r["version"]): 0.0 for r in rows}
    for name, version in startups:
        startups[(name, version)] = bare_startup(name, version) or 0.0
    head = ("client", "scenario", "setup", "via", "row s", "floor s", "x floor", "ok",
            "lab", "start", "scen.", "obs.", "down")  # fmt: skip
    print("  ".join(head))
    within = 0
    for row in rows:
        floor = floor_of(row, startups[(row["client"], row["version"])])
        ok = row["seconds"] <= TARGET_RATIO * floor + TARGET_SLACK
        within += ok
        summed: dict[str, float] = {}
        for phases in row.get("phases", {}).values():
            for name, seconds in phases.items():
                summed[name] = summed.get(name, 0.0) + seconds
        cells = [row["client"], row["scenario"], row["setup"], row["transport"],
                 f"{row['seconds']:.1f}", f"{floor:.1f}", f"{row['seconds'] / floor:.2f}",
                 "yes" if ok else "NO"]  # fmt: skip
        cells += [f"{summed.get(p, 0.0):.1f}" for p in
                  ("lab start", "client start", "scenario", "observe", "teardown")]  # fmt: skip
        print("  ".join(cells))
    print()
    for (name, version), seconds in sorted(startups.items()):
        print(f"bare start-up {name} {version}: {seconds:.2f} s")
    print(f"rows within 1.5 x floor + 5 s: {within} of {len(rows)}")
    print(f"wall time: {wall:.0f} s for {len(rows)} rows, {args.jobs} client(s) at a time "
          f"(target for the pinned matrix: {MATRIX_TARGET_SECONDS:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
