"""The ``mcp-lab clients`` subcommands (``list`` and ``run``; ``history`` and ``sweep``
are in :mod:`mcp_lab.runners.clients.history_commands`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcp_lab.runners import commands
from mcp_lab.runners.clients.definition import KINDS, TRANSPORTS, DefinitionError
from mcp_lab.runners.clients.pins import CLIENTS, clients_with_files, known
from mcp_lab.runners.interrupt import INTERRUPTED_EXIT, run_until_interrupted


def add_clients_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``clients`` to ``mcp-lab``'s subcommands."""
    clients = sub.add_parser(
        "clients", help="run real agent CLIs against a fresh lab, offline, and print the matrix"
    )
    actions = clients.add_subparsers(dest="clients_command", required=True)

    listing = actions.add_parser(
        "list", help="the clients and their pinned versions: agent CLIs, libraries, the Inspector"
    )
    listing.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table (default), or json: a row per client (name, kind, pinned version, "
        "transports, where it comes from)",
    )
    listing.add_argument("--json", action="store_true", help="the same as --format json")
    listing.add_argument("--kind", choices=list(KINDS), default=None, help="this kind only")
    listing.set_defaults(func=_list_clients)

    run = actions.add_parser("run", help="run clients (default: all) and print the matrix")
    run.add_argument(
        "--client",
        action="append",
        default=None,
        metavar="NAME",
        help=f"a client to run (repeatable; default: all). Known: {known()}",
    )
    run.add_argument(
        "--kind",
        choices=list(KINDS),
        default=None,
        help="run every built-in client of this kind (cli, library, inspector); with "
        "--client, the clients named too",
    )
    run.add_argument(
        "--client-file",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="a client of your own, as a client file (TOML; docs/own-client.md); repeatable. "
        "Without --client, only the files' clients run",
    )
    run.add_argument(
        "--transport",
        choices=list(TRANSPORTS),
        default=None,
        help="run every client over this transport only (default: every one it supports)",
    )
    run.add_argument(
        "--version",
        action="append",
        default=[],
        metavar="NAME=X",
        help="run version X of client NAME instead of the pinned one (repeatable); "
        "X may be 'latest', resolved through npm",
    )
    run.add_argument(
        "--scenario",
        action="append",
        default=None,
        metavar="NAME",
        help="a scenario to play (repeatable; default: every one that applies to each "
        "client; mcp-lab scenarios lists them)",
    )
    run.add_argument(
        "--tool",
        choices=["auto", "off", "on", "both"],
        default="auto",
        help="lab setups: without the server's tool get_review_status (off), with it (on, "
        "MCP_TEST_ENABLE_TOOL=true), or both; auto (default): both for the scenarios that "
        "ask for it (single), else off",
    )
    run.add_argument(
        "--timeout", type=float, default=180.0, help="seconds each client may run (default 180)"
    )
    run.add_argument(
        "--observe",
        type=float,
        default=6.0,
        metavar="SECONDS",
        help="how long the scored run watches, after the scenario's updates, for the client "
        "to bring them to its model unasked (default 6)",
    )
    run.add_argument(
        "--reinstall",
        action="store_true",
        help="install each client again over its cached install (an npm prefix or a "
        "virtualenv in the clients' cache), e.g. after a broken install or a changed "
        "dependency; a command on this machine is only found",
    )
    commands.add_matrix_options(run, docs="docs/clients.md", side_by_side="rows run")
    run.set_defaults(func=_run_clients)

    from mcp_lab.runners.clients.history_commands import add_parsers

    add_parsers(actions)
    from mcp_lab.runners.clients import capabilities_cli

    capabilities_cli.add_parsers(actions)  # export, declared


def _list_clients(args: argparse.Namespace) -> int:
    shown = [spec for spec in CLIENTS.values() if args.kind in (None, spec.kind)]
    if args.json or args.format == "json":
        rows = [
            {
                "name": spec.name,
                "title": spec.title,
                "kind": spec.kind,
                "version": spec.version,
                "source": spec.source,
                "package": spec.package,
                "transports": list(spec.transports),
                "installable": spec.not_installable is None,
                "not_installable": spec.not_installable,
            }
            for spec in shown
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len(spec.name) for spec in shown] + [len("name")])
    print(f"{'name':<{width}}  {'kind':<9} {'version':<9} {'transports':<10} title: source")
    for spec in shown:
        where = spec.not_installable or f"{spec.source} {spec.package}@{spec.version}"
        ways = ",".join(spec.transports)
        print(f"{spec.name:<{width}}  {spec.kind:<9} {spec.version:<9} {ways:<10} "
              f"{spec.title}: {where}")  # fmt: skip
    return 0


def _run_clients(args: argparse.Namespace) -> int:
    from mcp_lab.runners import run_folders
    from mcp_lab.runners.clients import matrix, runner
    from mcp_lab.runners.install import CLIENTS_CACHE, cache_dir
    from mcp_lab.scenarios import registry

    try:
        clients = clients_with_files(args.client_file)
    except DefinitionError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    own = [name for name, spec in clients.items() if spec.origin in _origins(args)]
    of_kind = [name for name, spec in CLIENTS.items() if spec.kind == args.kind]
    if args.kind is not None and not of_kind:
        # Not "all of them": an empty kind asks for nothing the lab has built in.
        print(f"mcp-lab: no built-in client is of kind {args.kind!r} (a client file of "
              "that kind runs with --client-file)", file=sys.stderr)  # fmt: skip
        return 2
    asked = [*(args.client or []), *of_kind]
    names = list(dict.fromkeys([*(asked or ([] if own else CLIENTS)), *own]))
    if commands.refuse_unknown(names, clients, "client"):
        return 2
    try:
        by_version = [n for n, spec in clients.items() if spec.installed_by_version]
        versions = commands.parse_versions(
            args.version, clients, "client", lambda name: name in by_version
        )
        scenarios = [registry.get(name) for name in args.scenario or registry.names()]
    except (ValueError, LookupError) as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    if args.observe <= 0 or args.timeout <= 0 or args.jobs < 1:
        print("mcp-lab: --observe, --timeout and --jobs must be positive", file=sys.stderr)
        return 2
    progress = runner.say_clients if not args.quiet else (lambda _: None)
    finished: list[matrix.ClientRow] = []
    chosen = [clients[name] for name in names]
    with run_folders.invocation(run_folders.runs_of("clients", cache_dir(CLIENTS_CACHE))) as runs:
        done, interrupted = run_until_interrupted(
            runner.run_clients(
                chosen,
                versions,
                scenarios,
                runs=runs,
                tool=args.tool,
                observe=args.observe,
                timeout=args.timeout,
                jobs=args.jobs,
                progress=progress,
                transport=args.transport,
                finished=finished,
                reinstall=args.reinstall,
            ),
            runner.say_clients,  # a Ctrl-C is said even with --quiet
        )
    rows = finished if done is None else done
    from mcp_lab.runners.clients.history import CLIENT_HISTORY, INTERRUPTED, RUN

    kept = CLIENT_HISTORY.keep(rows, source=INTERRUPTED if interrupted else RUN) if rows else None
    if rows or args.format == "json":
        commands.print_matrix(rows, args.format, matrix.CLIENT_MATRIX)
    commands.say_where(progress, runs, kept, "mcp-lab clients history")
    if interrupted:
        total = sum(runner.count_rows(c, scenarios, args.tool, args.transport) for c in chosen)
        shown = "the matrix above has only those" if rows else "nothing to show or keep"
        marked = ", kept in the history as interrupted" if kept else ""
        runner.say_clients(f"interrupted: {len(rows)} of {total} row(s) finished; {shown}{marked}")
        return INTERRUPTED_EXIT
    if rows and kept is None:  # said even with --quiet: the exit code's reason
        runner.say_clients(
            "exit code 1: the rows above were not kept in the history (see why above)"
        )
        return 1
    failed = sorted({f"{r.client} {r.version}" for r in rows if r.runner_failed is not None})
    if failed:  # said even with --quiet: the exit code's reason
        runner.say_clients(
            f"exit code 1: the runner could not run {', '.join(failed)} (see its row's notes)"
        )
        return 1
    return 0


def _origins(args: argparse.Namespace) -> set[str]:
    return {str(path) for path in args.client_file}
