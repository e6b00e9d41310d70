"""``mcp-lab healthcheck``, ``status`` and ``connect``: the commands that look at a
running lab and say what they find (their parsers and handlers; the work is done
in healthcheck.py, status.py and connect.py, each imported when its command runs)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from mcp_lab.cli import common


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``healthcheck``, ``status`` and ``connect`` to ``mcp-lab``'s subcommands."""
    health = sub.add_parser("healthcheck", help="exit 0 if the server or updater is healthy")
    health.add_argument(
        "process",
        choices=["server", "updater"],
        help="server: its /healthz answers (the running mcp-lab up's server, unless "
        "MCP_TEST_HOST/MCP_TEST_PORT name another); updater: its heartbeat is in Redis",
    )
    health.add_argument("--json", action="store_true", help=common.JSON_HELP)
    health.set_defaults(func=_cmd_healthcheck)

    status = sub.add_parser(
        "status",
        help="is a lab running: its URLs, Redis, data, the run, sessions and clients now "
        "(exit 1 when no server answers)",
    )
    status.add_argument("--json", action="store_true", help=common.JSON_HELP)
    status.set_defaults(func=_cmd_status)

    connect = sub.add_parser(
        "connect",
        help="the configuration that points a client at the running lab",
        description="The configuration that points a client at the running lab: each "
        "client file with a [connect] table is a choice (services/mcp_lab/runners/"
        "clients/defs/*.toml; docs/own-client.md).",
    )
    connect.add_argument(
        "client",
        nargs="?",
        choices=_Connectable(),
        metavar="CLIENT",  # argparse would list the choices while building the parser
        help="the client to configure: %(choices)s",
    )
    connect.add_argument(
        "--client-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="instead of CLIENT: a client file of your own with a [connect] table",
    )
    connect.add_argument("--json", action="store_true", help=common.JSON_HELP)
    connect.set_defaults(func=_cmd_connect)


class _Connectable:
    """The names ``connect`` takes: the client files with a ``[connect]`` table, read
    (~20 ms) only when a ``connect`` is parsed or its help shown, not by ``up``."""

    def _names(self) -> list[str]:
        from mcp_lab.cli.connect import CLIENTS

        return list(CLIENTS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    from mcp_lab.cli import healthcheck

    settings = common.settings()
    if args.process == "server":
        return common.run_async(healthcheck.server(common.with_lab_server(settings), args.json))
    settings = common.with_lab_redis(settings)
    return common.with_redis(healthcheck.updater(settings, args.json), settings.redis_url)


def _cmd_status(args: argparse.Namespace) -> int:
    from mcp_lab.cli import status

    return common.run_async(status.run(common.lab(common.settings(), kept_too=True), args.json))


def _cmd_connect(args: argparse.Namespace) -> int:
    from mcp_lab.cli import connect
    from mcp_lab.runners.clients.definition import ClientDef, DefinitionError

    if (args.client is None) == (args.client_file is None):
        print("mcp-lab connect: give CLIENT or --client-file PATH (one of them)", file=sys.stderr)
        return 2
    client: str | ClientDef = args.client
    if args.client_file is not None:
        try:
            client = connect.from_file(args.client_file)
        except DefinitionError as exc:
            print(f"mcp-lab: {exc}", file=sys.stderr)
            return 2
    return connect.main(client, common.lab(common.settings()).server.mcp_url, args.json)
