"""``mcp-lab up``, ``server`` and ``updater``: the commands that run the lab or one of
its long-running processes (their parsers and handlers). Each handler imports its
process only when it runs: their start time matters (``up`` spawns the other two)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mcp_lab.cli import common
from mcp_lab.process.lifeline import watch_parent
from mcp_lab.protocol import Transport


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``up``, ``server`` and ``updater`` to ``mcp-lab``'s subcommands."""
    up = sub.add_parser("up", help="run Redis (unless REDIS_URL is set), server and updater")
    up.add_argument(
        "--port", type=int, default=None, help="HTTP port of the server (default: MCP_TEST_PORT)"
    )
    up.add_argument(
        "--redis-port",
        type=int,
        default=None,
        help="port of the embedded Redis (default: 6390, or a free one)",
    )
    keep = up.add_mutually_exclusive_group()
    keep.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the embedded Redis keeps its data "
        "(default: $XDG_DATA_HOME/mcp-lab/redis, i.e. ~/.local/share/mcp-lab/redis)",
    )
    keep.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep the embedded Redis's data in a temporary folder, removed on exit",
    )
    up.add_argument(
        "--scenario",
        default=None,
        help="the scenario to play (default: MCP_TEST_SCENARIO, else single; "
        "mcp-lab scenarios lists them)",
    )
    up.set_defaults(func=_cmd_up)

    server = sub.add_parser("server", help="run the MCP server")
    server.add_argument(
        "--transport",
        choices=[t.short for t in (Transport.STREAMABLE_HTTP, Transport.STDIO)],
        default=Transport.STREAMABLE_HTTP.short,
        help="http: Streamable HTTP (both protocol generations) and legacy SSE on one port "
        "(default); stdio: one client on stdin/stdout, logs on stderr",
    )
    server.set_defaults(func=_cmd_server)

    updater = sub.add_parser("updater", help="run the updater")
    updater.add_argument(
        "--burst",
        action="store_true",
        help="apply every job in the stream, each when due, then exit (exit 1 without Redis)",
    )
    updater.set_defaults(func=_cmd_updater)


def _cmd_up(args: argparse.Namespace) -> int:
    from mcp_lab.cli.up import UpOptions, run_lab

    data_dir = args.data_dir.expanduser().resolve() if args.data_dir is not None else None
    options = UpOptions(args.port, args.redis_port, data_dir, args.ephemeral, args.scenario)
    return run_lab(common.settings(), options)


def _cmd_server(args: argparse.Namespace) -> int:
    from mcp_lab.server import run

    settings = common.with_lab_redis(common.settings())
    watch_parent()
    run.main(settings, transport=args.transport, matrix=_matrix_history)
    return 0


def _matrix_history() -> dict[str, Any]:
    """The dashboard's ``/api/matrix``: the runners' history, imported when first asked
    for (the server starts without the runners)."""
    from mcp_lab.runners import matrix_history
    from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
    from mcp_lab.runners.clients.history import CLIENT_HISTORY

    return matrix_history.matrix(CLIENT_HISTORY, BRIDGE_HISTORY)


def _cmd_updater(args: argparse.Namespace) -> int:
    from mcp_lab import updater

    settings = common.with_lab_redis(common.settings())
    watch_parent()
    return updater.main(settings, burst=args.burst)
