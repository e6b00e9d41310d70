"""The ``mcp-lab clients`` subcommands (``list`` and ``run``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from services.clients.matrix import SCENARIO_CHOICES
from services.clients.pins import CLIENTS, known, parse_versions


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``clients`` to ``mcp-lab``'s subcommands."""
    clients = sub.add_parser(
        "clients", help="run real agent CLIs against a fresh lab, offline, and print the matrix"
    )
    actions = clients.add_subparsers(dest="clients_command", required=True)

    listing = actions.add_parser("list", help="the clients and their pinned versions")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(func=_cmd_list)

    run = actions.add_parser("run", help="run clients (default: all) and print the matrix")
    run.add_argument(
        "--client",
        action="append",
        default=None,
        metavar="NAME",
        help=f"a client to run (repeatable; default: all). Known: {known()}",
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
        choices=list(SCENARIO_CHOICES),
        default="both",
        help="run each client against a lab without the server's tool (no-tool), with it "
        "(tool: MCP_TEST_ENABLE_TOOL=true), or both, one after the other (default); each "
        "setup has a scored run and a pull run",
    )
    run.add_argument(
        "--format",
        choices=["table", "markdown", "json"],
        default="table",
        help="table: the matrix (default); markdown: as in docs/clients.md; json: every row",
    )
    run.add_argument(
        "--timeout", type=float, default=180.0, help="seconds each client may run (default 180)"
    )
    run.add_argument(
        "--observe",
        type=float,
        default=6.0,
        metavar="SECONDS",
        help="how long the scored run watches, after the update, for the client to bring "
        "it to its model unasked (default 6)",
    )
    run.set_defaults(func=_cmd_run)


def _cmd_list(args: argparse.Namespace) -> int:
    if args.json:
        rows = [
            {
                "name": spec.name,
                "title": spec.title,
                "version": spec.version,
                "package": spec.package,
                "installable": spec.not_installable is None,
                "not_installable": spec.not_installable,
            }
            for spec in CLIENTS.values()
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for spec in CLIENTS.values():
        where = spec.not_installable or f"npm {spec.package}@{spec.version}"
        print(f"{spec.name:<12} {spec.version:<9} {spec.title}: {where}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from services.clients import matrix, runner

    names = args.client or list(CLIENTS)
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        print(f"mcp-lab: unknown client(s) {unknown}; known: {known()}", file=sys.stderr)
        return 2
    try:
        versions = parse_versions(args.version)
    except ValueError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    scenarios = SCENARIO_CHOICES[args.scenario]
    if args.observe <= 0 or args.timeout <= 0:
        print("mcp-lab: --observe and --timeout must be positive", file=sys.stderr)
        return 2
    rows = asyncio.run(
        runner.run_clients(names, versions, args.timeout, scenarios, observe=args.observe)
    )
    if args.format == "json":
        print(matrix.to_json(rows))
    elif args.format == "markdown":
        print(matrix.to_markdown(rows), end="")
    else:
        print(matrix.to_table(rows))
    return 0
