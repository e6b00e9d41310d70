"""``mcp-lab healthcheck``, ``status`` and ``connect``: the commands that look at a
running lab and say what they find (their parsers and handlers; the work is done
in healthcheck.py, status.py and connect.py, each imported when its command runs)."""

from __future__ import annotations

import argparse

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
        "connect", help="the configuration that points a client at the running lab"
    )
    from mcp_lab.cli.connect import CLIENTS as CONNECTABLE  # a few ms: no SDK, no Redis

    connect.add_argument("client", choices=list(CONNECTABLE), help="the client to configure")
    connect.add_argument("--json", action="store_true", help=common.JSON_HELP)
    connect.set_defaults(func=_cmd_connect)


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

    return connect.main(args.client, common.lab(common.settings()).server.mcp_url, args.json)
