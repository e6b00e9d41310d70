"""The ``mcp-lab bridges`` subcommands (``list``, ``run`` and ``history``)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from mcp_lab.runners import commands
from mcp_lab.runners.bridges.specs import BRIDGES, direction, installed_by_version, known
from mcp_lab.runners.interrupt import INTERRUPTED_EXIT, run_until_interrupted


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``bridges`` to ``mcp-lab``'s subcommands."""
    bridges = sub.add_parser(
        "bridges",
        help="put bridges and gateways between a reference client and a fresh lab: do "
        "subscriptions get through?",
    )
    actions = bridges.add_subparsers(dest="bridges_command", required=True)

    listing = actions.add_parser("list", help="the bridges, their versions and directions")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(func=_cmd_list)

    run = actions.add_parser("run", help="run bridges (default: all) and print the matrix")
    run.add_argument(
        "--bridge", action="append", default=None, metavar="NAME",
        help=f"a bridge to run (repeatable; default: all). Known: {known()}",
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
        "--format", choices=["table", "markdown", "json"], default="table",
        help="table: the matrix (default); markdown: as in docs/bridges.md; json: every row",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=float, default=8.0, metavar="SECONDS",
        help="how long the reference client waits for each notification (default 8)",
    )  # fmt: skip
    run.add_argument(
        "--jobs", type=int, default=3, metavar="N", help="runs side by side (default 3)"
    )
    run.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr, only the matrix"
    )
    run.set_defaults(func=_cmd_run)

    shown = commands.add_history_parser(
        actions,
        kind="bridge",
        summary="every bridges run kept: per bridge, direction and scenario, the marks over "
        "versions and dates, each change marked",
        formats="table: per bridge, direction and scenario, one line per version (default); "
        "json: each cell's latest marks, entries and changes",
        func=_cmd_history,
    )
    shown.add_argument(
        "--direction", default=None, metavar="CLIENT->LAB", help="this direction only"
    )


def _cmd_list(args: argparse.Namespace) -> int:
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
            }
            for spec in BRIDGES.values()
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(name) for name in BRIDGES)
    for spec in BRIDGES.values():
        where = spec.not_installable or f"{spec.source} {spec.package}@{spec.version}"
        ways = ", ".join(d.name for d in spec.directions) or "-"
        print(f"{spec.name:<{width}} {where:<26} {ways}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from mcp_lab.runners import run_folders
    from mcp_lab.runners.bridges import history, matrix, runner
    from mcp_lab.runners.bridges.install import cache_dir
    from mcp_lab.scenarios import registry

    names = list(dict.fromkeys(args.bridge or BRIDGES))  # each once, in the order given
    if commands.refuse_unknown(names, BRIDGES, "bridge"):
        return 2
    try:
        versions = commands.parse_versions(
            args.version, BRIDGES, "bridge", by_version=installed_by_version
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
    progress = runner.say_on_stderr if not args.quiet else (lambda _: None)
    finished: list[matrix.Row] = []
    with run_folders.invocation(run_folders.runs_of("bridges", cache_dir())) as runs:
        done, interrupted = run_until_interrupted(
            runner.run_bridges(
                names,
                versions,
                scenarios,
                runs=runs,
                timeout=args.timeout,
                jobs=args.jobs,
                directions=directions,
                progress=progress,
                finished=finished,
            ),
            runner.say_on_stderr,  # a Ctrl-C is said even with --quiet
        )
    rows = finished if done is None else done
    kept = history.keep(rows, "mcp-lab bridges") if rows else None
    if rows or args.format == "json":
        commands.print_matrix(rows, args.format, to_json=matrix.to_json,
                              to_markdown=matrix.to_markdown, to_table=matrix.to_table)  # fmt: skip
    commands.say_where(progress, runs, kept, "mcp-lab bridges history")
    if interrupted:
        shown = ", shown above and kept in the history" if rows else ""
        runner.say_on_stderr(f"interrupted: {len(rows)} row(s) finished{shown}")
        return INTERRUPTED_EXIT
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
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
        read=history.read,
        cells=history.cells,
        to_json=history.to_json,
        to_table=history.to_table,
        only={"direction": way},
    )
