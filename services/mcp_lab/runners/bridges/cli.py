"""The ``mcp-lab bridges`` subcommands (``list``, ``run`` and ``history``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from mcp_lab.runners import commands
from mcp_lab.runners.bridges.specs import (
    BRIDGES,
    BridgeSpec,
    bridges_with_files,
    by_version,
    direction,
    known_bridges,
)
from mcp_lab.runners.definitions import DefinitionError
from mcp_lab.runners.interrupt import INTERRUPTED_EXIT, run_until_interrupted
from mcp_lab.runners.progress import quiet

_BRIDGE_FILE = (
    "a bridge of your own, as a bridge file (TOML; docs/bridges.md, 'Your own bridge'); repeatable"
)


def add_bridges_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``bridges`` to ``mcp-lab``'s subcommands."""
    bridges = sub.add_parser(
        "bridges",
        help="put bridges and gateways between a reference client and a fresh lab: do "
        "subscriptions get through?",
    )
    actions = bridges.add_subparsers(dest="bridges_command", required=True)

    listing = actions.add_parser("list", help="the bridges, their versions and directions")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.add_argument(
        "--bridge-file", action="append", default=[], type=Path, metavar="PATH",
        help=f"{_BRIDGE_FILE}: listed after the built-in bridges",
    )  # fmt: skip
    listing.set_defaults(func=_list_bridges)

    run = actions.add_parser("run", help="run bridges (default: all) and print the matrix")
    run.add_argument(
        "--bridge", action="append", default=None, metavar="NAME",
        help=f"a bridge to run (repeatable; default: all). Known: {known_bridges()}",
    )  # fmt: skip
    run.add_argument(
        "--bridge-file", action="append", default=[], type=Path, metavar="PATH",
        help=f"{_BRIDGE_FILE}. Without --bridge, only the files' bridges run",
    )  # fmt: skip
    run.add_argument(
        "--version", action="append", default=[], metavar="NAME=X",
        help="run version X of bridge NAME instead of the pinned one (repeatable); X may be "
        "'latest' (npm and PyPI bridges). Each version is started with its own command "
        "line; a direction it cannot run is marked 'not supported'",
    )  # fmt: skip
    run.add_argument(
        "--scenario", action="append", default=None, metavar="NAME",
        help="a scenario to play (repeatable; default: single, repeated, list-changed)",
    )  # fmt: skip
    run.add_argument(
        "--direction", action="append", default=None, metavar="CLIENT->LAB",
        help="only this direction (repeatable; e.g. stdio->HTTP; default: every one a "
        "bridge supports)",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=float, default=8.0, metavar="SECONDS",
        help="how long the reference client waits for each notification (default 8)",
    )  # fmt: skip
    commands.add_matrix_options(run, docs="docs/bridges.md", side_by_side="runs")
    run.set_defaults(func=_run_bridges)

    shown = commands.add_history_parser(
        actions,
        kind="bridge",
        summary="every bridges run kept: per bridge, direction and scenario, the marks over "
        "versions and dates, each change marked",
        formats="table: per bridge, direction and scenario, one line per version (default); "
        "json: each cell's latest marks, entries and changes",
        func=_bridges_history,
    )
    shown.add_argument(
        "--direction", default=None, metavar="CLIENT->LAB", help="this direction only"
    )


def _bridges(files: list[Path]) -> dict[str, BridgeSpec] | None:
    """The built-in bridges and those of ``files``; None (said on stderr) for a file
    that cannot be used."""
    try:
        return bridges_with_files(files)
    except DefinitionError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return None


def _list_bridges(args: argparse.Namespace) -> int:
    bridges = _bridges(args.bridge_file)
    if bridges is None:
        return 2
    if args.json:
        rows = [
            {
                "name": spec.name,
                "title": spec.title,
                "source": spec.source,
                "package": spec.package,
                "version": spec.version,
                "directions": [d.name for d in spec.directions],
                "installable": spec.not_installable is None,
                "not_installable": spec.not_installable,
                "caveat": spec.caveat,
                "origin": spec.origin,
            }
            for spec in bridges.values()
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(name) for name in bridges)
    for spec in bridges.values():
        where = spec.not_installable or f"{spec.source} {spec.package}@{spec.version}"
        ways = ", ".join(d.name for d in spec.directions) or "-"
        print(f"{spec.name:<{width}} {where:<26} {ways}")
    return 0


def _run_bridges(args: argparse.Namespace) -> int:
    from mcp_lab.runners import run_folders
    from mcp_lab.runners.bridges import history, matrix, runner
    from mcp_lab.runners.install import BRIDGES_CACHE, cache_dir
    from mcp_lab.scenarios import registry

    bridges = _bridges(args.bridge_file)
    if bridges is None:
        return 2
    files = {str(path) for path in args.bridge_file}
    own = [name for name, spec in bridges.items() if spec.origin in files]
    # Each once, in the order given; the files' bridges run too (without --bridge, alone).
    names = list(dict.fromkeys([*(args.bridge or ([] if own else BRIDGES)), *own]))
    if commands.refuse_unknown(names, bridges, "bridge"):
        return 2
    try:
        versions = commands.parse_versions(
            args.version, bridges, "bridge", by_version=lambda name: by_version(bridges[name])
        )
        scenarios = [registry.get(n) for n in args.scenario or runner.DEFAULT_SCENARIOS]
        directions = [direction(d) for d in args.direction] if args.direction else None
    except (ValueError, LookupError) as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    if not 0 < args.timeout < math.inf or args.jobs < 1:  # nan and inf too
        print("mcp-lab: --timeout (seconds) and --jobs must be positive and finite",
              file=sys.stderr)  # fmt: skip
        return 2
    progress = runner.say_bridges if not args.quiet else quiet
    finished: list[matrix.BridgeRow] = []
    with run_folders.invocation(run_folders.runs_of("bridges", cache_dir(BRIDGES_CACHE))) as runs:
        done, interrupted = run_until_interrupted(
            runner.run_bridges(
                [bridges[name] for name in names],
                versions,
                scenarios,
                runs=runs,
                timeout=args.timeout,
                jobs=args.jobs,
                directions=directions,
                progress=progress,
                finished=finished,
            ),
            runner.say_bridges,  # a Ctrl-C is said even with --quiet
        )
    rows = finished if done is None else done
    kept = history.BRIDGE_HISTORY.keep(rows, "mcp-lab bridges") if rows else None
    if rows or args.format == "json":
        commands.print_matrix(rows, args.format, matrix.BRIDGE_MATRIX)
    commands.say_where(progress, runs, kept, "mcp-lab bridges history")
    if interrupted:
        shown = ", shown above and kept in the history" if rows else ""
        runner.say_bridges(f"interrupted: {len(rows)} row(s) finished{shown}")
        return INTERRUPTED_EXIT
    if rows and kept is None:  # said even with --quiet: the exit code's reason
        runner.say_bridges(
            "exit code 1: the rows above were not kept in the history (see why above)"
        )
        return 1
    return 0


def _bridges_history(args: argparse.Namespace) -> int:
    from mcp_lab.runners.bridges import history

    try:
        way = None if args.direction is None else direction(args.direction).name
    except ValueError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    return commands.show_history(
        "bridge",
        args.bridge,
        args.scenario,
        args.format,
        read=history.BRIDGE_HISTORY.read,
        cells=history.BRIDGE_HISTORY.cells,
        to_json=history.BRIDGE_HISTORY.to_json,
        to_table=history.BRIDGE_HISTORY.to_table,
        only={"direction": way},
    )
