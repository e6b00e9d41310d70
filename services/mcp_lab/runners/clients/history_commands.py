"""``mcp-lab clients history`` and ``mcp-lab clients sweep`` (mcp_lab.runners.clients.cli
adds them beside ``list`` and ``run``). The rows of both are kept, and shown, by the
history common to clients and bridges (:data:`mcp_lab.runners.clients.history.CLIENT_HISTORY`,
a :class:`mcp_lab.runners.history_kinds.HistoryKind`)."""

from __future__ import annotations

import argparse
import json
import sys

from mcp_lab.runners import commands, history_store
from mcp_lab.runners.clients.definition import HTTP, NPM
from mcp_lab.runners.clients.history import CLIENT_HISTORY, SWEEP
from mcp_lab.runners.clients.matrix import ClientRow
from mcp_lab.runners.clients.pins import CLIENTS, known
from mcp_lab.runners.interrupt import INTERRUPTED_EXIT, run_until_interrupted


def add_parsers(actions: argparse._SubParsersAction) -> None:
    """Add ``history`` and ``sweep`` to ``mcp-lab clients``."""
    commands.add_history_parser(
        actions,
        kind="client",
        summary="every clients run and sweep kept: per client, the verdict over versions and "
        "dates, each change marked",
        formats="table: per client, scenario and setup, one line per version (default); json: "
        "each cell's latest verdict, entries and changes",
        func=_cmd_clients_history,
    )

    sweep = actions.add_parser(
        "sweep",
        help="run one client over a range of its released versions (npm) and report the "
        "first version at which each checklist answer changed",
    )
    sweep.add_argument("--client", required=True, metavar="NAME", help=f"Known: {known()}")
    sweep.add_argument(
        "--from", dest="first", default=None, metavar="V", help="first version (default: the first)"
    )
    sweep.add_argument(
        "--to", dest="last", default=None, metavar="V", help="last version, or latest (default)"
    )
    which = sweep.add_mutually_exclusive_group()
    which.add_argument(
        "--every",
        type=int,
        default=None,
        metavar="N",
        help="run every Nth version of the range (and its last), then bisect where two disagree",
    )
    which.add_argument(
        "--versions",
        default=None,
        metavar="A,B,C",
        help="run exactly these versions (no bisection)",
    )
    sweep.add_argument(
        "--no-bisect",
        dest="bisect",
        action="store_false",
        help="run only the versions sampled (the range's ends, or --every's)",
    )
    sweep.add_argument(
        "--scenario",
        action="append",
        default=None,
        metavar="NAME",
        help="a scenario to play (repeatable; default: single)",
    )
    sweep.add_argument(
        "--tool",
        choices=["auto", "off", "on", "both"],
        default="auto",
        help="lab setups, as for clients run (default auto: both for single)",
    )
    sweep.add_argument(
        "--observe",
        type=float,
        default=6.0,
        metavar="SECONDS",
        help="as for clients run: how long the scored run watches after the updates (default 6)",
    )
    sweep.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        metavar="SECONDS",
        help="seconds each client run may take (default 180)",
    )
    sweep.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table: a row per version run and the first changes (default); json: everything",
    )
    sweep.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    sweep.set_defaults(func=_cmd_sweep)


def _cmd_clients_history(args: argparse.Namespace) -> int:
    return commands.show_history(
        "client",
        args.client,
        args.scenario,
        args.format,
        read=CLIENT_HISTORY.read,
        cells=CLIENT_HISTORY.cells,
        to_json=CLIENT_HISTORY.to_json,
        to_table=CLIENT_HISTORY.to_table,
    )


def _cmd_sweep(args: argparse.Namespace) -> int:
    from mcp_lab.runners import run_folders
    from mcp_lab.runners.clients import runner, sweep
    from mcp_lab.runners.install import (
        CLIENTS_CACHE,
        InstallError,
        cache_dir,
        released,
        resolve_version,
    )
    from mcp_lab.runners.versions import version_key
    from mcp_lab.scenarios import registry

    spec = CLIENTS.get(args.client)
    if spec is None or spec.package is None or spec.not_installable or spec.source != NPM:
        why = "unknown" if spec is None else (spec.not_installable or "not an npm package")
        print(f"mcp-lab: client {args.client!r}: {why} (known: {known()})", file=sys.stderr)
        return 2
    try:
        scenarios = [registry.get(name) for name in args.scenario or ["single"]]
    except LookupError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    if not any(runner.applies(s, spec) for s in scenarios):
        print(f"mcp-lab: no scenario given applies to {spec.name}", file=sys.stderr)
        return 2
    if (args.every is not None and args.every < 1) or args.observe <= 0 or args.timeout <= 0:
        print("mcp-lab: --every, --observe and --timeout must be positive", file=sys.stderr)
        return 2
    say = runner.say_clients if not args.quiet else (lambda _: None)
    if args.versions is not None:
        named = {v.strip() for v in args.versions.split(",") if v.strip()}
        versions = sorted(named, key=version_key)
        if not versions:
            print("mcp-lab: --versions names no version", file=sys.stderr)
            return 2
    else:
        try:
            say(f"asking npm for the versions of {spec.package}")
            listed = released(spec.package)
            last = args.last
            if last is None or last == "latest":
                last = resolve_version(spec.package, "latest")
            versions = sweep.select(listed, args.first, last)
        except (InstallError, ValueError) as exc:
            print(f"mcp-lab: {exc}", file=sys.stderr)
            return 2

    with run_folders.invocation(run_folders.runs_of("clients", cache_dir(CLIENTS_CACHE))) as runs:

        async def one(version: str) -> list[ClientRow]:
            rows = await runner.run_client(
                spec,
                version,
                scenarios,
                runs=runs,
                tool=args.tool,
                observe=args.observe,
                timeout=args.timeout,
                progress=say,
                transport=HTTP,  # a sweep compares versions, over one transport
            )
            CLIENT_HISTORY.keep(rows, source=SWEEP)
            return rows

        done, interrupted = run_until_interrupted(
            sweep.sweep(
                spec.name,
                versions,
                one,
                every=args.every,
                bisect=args.bisect and args.versions is None,
                run_all=args.versions is not None,
                progress=say,
            ),
            runner.say_clients,
        )
    if done is None or interrupted:
        runner.say_clients(
            f"interrupted: the versions finished before it are kept in the history "
            f"(mcp-lab clients history --client {spec.name})"
        )
        return INTERRUPTED_EXIT
    if args.format == "json":
        print(json.dumps(done.to_json(), indent=2))
    else:
        print(sweep.sweep_table(done))
    commands.say_where(say, runs, history_store.history_path(), "mcp-lab clients history")
    return 0 if any(not done.failed(v) for v in done.ran) else 1
