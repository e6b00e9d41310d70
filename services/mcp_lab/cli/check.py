"""``mcp-lab check``: the command line of :mod:`mcp_lab.runners.clients.check` (parsing, the
verdict printed or written, the exit code)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from pathlib import Path

from mcp_lab.runners.clients import baseline as baselines
from mcp_lab.runners.clients.check import (
    CHECK_TIMEOUT,
    DEFAULT_EXPECT,
    EXIT_ERROR,
    CheckError,
    check,
    exit_code,
    to_json,
    to_junit,
    to_table,
)
from mcp_lab.runners.clients.definition import (
    HTTP,
    TRANSPORTS,
    DefinitionError,
    from_command,
    load_client,
)
from mcp_lab.runners.clients.pins import CLIENTS, known
from mcp_lab.runners.clients.requirements import to_checks
from mcp_lab.scenarios import registry

_EPILOG = """\
exit code: 0 when every scenario's level is at least --expect, 1 when one is below,
2 on a usage or start-up error (a command that cannot start, a lab that did not).
With --baseline the exit code is the baseline's instead: 0 when the failed checks are
exactly its entries, 1 on a new failure or on an entry that now passes (stale).
For http, {url} in CMD is the lab's MCP URL (also MCP_LAB_URL in its environment); for
stdio, {server_command} is the command line that starts the lab as a stdio server for
the client to spawn (also MCP_LAB_SERVER_COMMAND). docs/own-client.md has examples."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``check`` to ``mcp-lab``'s subcommands."""
    parser = sub.add_parser(
        "check",
        help="a fresh lab, one client, one verdict, with an exit code (for a CI job)",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--command", metavar="CMD", help="the client: a command line to run")
    which.add_argument("--client-file", type=Path, metavar="PATH", help="a client file (TOML)")
    which.add_argument("--client", metavar="NAME", help=f"a built-in client: {known()}")
    parser.add_argument(
        "--transport",
        choices=list(TRANSPORTS),
        default=HTTP,
        help="how the client reaches the lab: http (its URL) or stdio (it starts the lab's "
        "stdio server); default http",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        default=None,
        metavar="NAME",
        help="a scenario to play (repeatable; default: single; mcp-lab scenarios lists them)",
    )
    parser.add_argument(
        "--expect",
        type=int,
        default=DEFAULT_EXPECT,
        choices=range(0, 8),
        metavar="LEVEL",
        help=f"the level to reach, 0-7 (default {DEFAULT_EXPECT}: re-read after the update)",
    )
    parser.add_argument(
        "--format",
        choices=["table", "json", "junit", "checks"],
        default="table",
        help="table (default), json, junit (a test case per checklist item, for CI), or "
        "checks (JSON, one check per requirement with its spec reference and SUCCESS, "
        "FAILURE or NOT_TESTABLE, as the conformance suite writes; docs/requirements.md)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help='known failures, JSON: {"expected_failures": [{"scenario": S, "check": ID, '
        '"client": NAME (optional)}]}; fails on a failed check it does not list and on an '
        "entry that now passes (stale); each said on stderr",
    )
    parser.add_argument(
        "--output", type=Path, metavar="FILE",
        help="write it there; stdout then shows the table (for a person reading the log)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout",
        type=float,
        default=CHECK_TIMEOUT,
        metavar="S",
        help=f"seconds the client may run before it is stopped (default {CHECK_TIMEOUT:g})",
    )
    parser.add_argument(
        "--own-home",
        action="store_true",
        help="with --command: run it under your HOME and XDG folders (its own config, "
        "logins, caches) instead of a fresh HOME of the run's own; it gets the rest of "
        "your environment either way",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=_cmd_check)


def _say(line: str) -> None:
    print(f"mcp-lab check: {line}", file=sys.stderr, flush=True)


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        if args.own_home and args.command is None:
            raise DefinitionError("--own-home is for --command (a client of your own)")
        if args.command is not None:
            client = replace(from_command(args.command, (args.transport,)), own_home=args.own_home)
        elif args.client_file is not None:
            client = load_client(args.client_file)
        elif args.client in CLIENTS:
            client = CLIENTS[args.client]
        else:
            raise DefinitionError(f"unknown client {args.client!r} (known: {known()})")
        scenarios = [registry.get(name) for name in args.scenario or ["single"]]
        known_failures = None if args.baseline is None else baselines.load(args.baseline)
    except (DefinitionError, LookupError, baselines.BaselineError) as exc:
        print(f"mcp-lab check: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.timeout <= 0:
        print("mcp-lab check: --timeout must be positive", file=sys.stderr)
        return EXIT_ERROR
    progress = (lambda _: None) if args.quiet else _say
    if args.command is not None:
        progress(
            "the command runs with your environment and your HOME (--own-home)"
            if args.own_home
            else "the command runs with your environment under a HOME of the run's own "
            "(--own-home: yours)"
        )
    try:
        verdicts = asyncio.run(
            check(
                client,
                scenarios,
                transport=args.transport,
                expect=args.expect,
                timeout=args.timeout,
                progress=progress,
            )
        )
    except CheckError as exc:
        print(f"mcp-lab check: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # the lab and the client are stopped on the way out
        print("mcp-lab check: interrupted; no verdict", file=sys.stderr)
        return 130
    render = {"table": to_table, "json": to_json, "junit": to_junit, "checks": to_checks}[
        args.format
    ]
    text = render(verdicts)
    if args.output is not None:
        args.output.write_text(text if text.endswith("\n") else text + "\n")
        progress(f"{args.format} written to {args.output}")
        if args.format != "table":
            print(to_table(verdicts))
    else:
        print(text)
    if known_failures is None:
        return exit_code(verdicts)
    code, lines = baselines.judge(known_failures, verdicts)
    for line in lines:  # said even with --quiet: it is the verdict
        _say(line)
    return code
