"""``mcp-lab``: run the lab, or one of its processes, and poke its state by hand."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcp_lab.cli import look_commands, probe_command, process_commands, state_commands
from mcp_lab.cli.scenarios import add_parser as add_scenarios_parser

# What a command imports before it runs (see _import_first): the settings, and the
# modules of the long-running processes.
_FIRST_IMPORTS = {
    "up": ("mcp_lab.settings", "mcp_lab.cli.up"),
    "server": ("mcp_lab.settings", "mcp_lab.server.run"),
    "updater": ("mcp_lab.settings", "mcp_lab.updater"),
}


# Commands whose parser needs nothing from mcp_lab.runners.clients: for these the
# ``clients`` sub-command (its parser imports the scoring and mcp_types, ~0.2 s)
# is left out, which keeps it off the start of ``up`` and of the processes it
# runs. Any other first argument (``clients``, ``--help``, a typo) gets all of them.
_WITHOUT_CLIENTS = frozenset(
    {
        "up",
        "server",
        "updater",
        "trigger",
        "reset",
        "report",
        "probe",
        "healthcheck",
        "status",
        "connect",
        "scenarios",
        "--version",
    }
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"mcp-lab {version('mcp-subscribe-lab')}"
    except PackageNotFoundError:
        return "mcp-lab (not installed: no version)"


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked: importlib.metadata reads the installed
    distributions, ~15 ms that every command (``up`` before it spawns the server)
    would pay for nothing."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(_version())
        parser.exit()


def build_parser(with_clients: bool = True) -> argparse.ArgumentParser:
    """The argument parser of ``mcp-lab`` (without the ``clients`` sub-command
    unless ``with_clients``)."""
    parser = argparse.ArgumentParser(
        prog="mcp-lab",
        description="MCP resource-subscription compatibility lab. Settings: MCP_TEST_* and "
        "REDIS_URL environment variables (see docs/usage.md).",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    process_commands.add_parser(sub)  # up, server, updater
    state_commands.add_parser(sub)  # trigger, reset, report
    probe_command.add_parser(sub)
    state_commands.add_redis_cli_parser(sub)
    look_commands.add_parser(sub)  # healthcheck, status, connect
    add_scenarios_parser(sub)

    if with_clients:
        from mcp_lab.cli.check import add_parser as add_check_parser
        from mcp_lab.runners.bridges.cli import add_bridges_parser
        from mcp_lab.runners.clients.cli import add_clients_parser

        add_clients_parser(sub)
        add_bridges_parser(sub)
        add_check_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run ``mcp-lab``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["redis-cli"]:  # every later argument is redis-cli's, options included
        sys.exit(state_commands.cmd_redis_cli(argv[1:]))
    with_clients = not argv or argv[0] not in _WITHOUT_CLIENTS
    args = build_parser(with_clients).parse_args(argv)
    _import_first(args.command)
    sys.exit(args.func(args))


def _import_first(command: str) -> None:
    """Import what ``command`` needs before it runs, untracked by the garbage
    collector (:func:`mcp_lab.process.heap.import_untracked`)."""
    from mcp_lab.process import heap

    heap.import_untracked(_FIRST_IMPORTS.get(command, ("mcp_lab.settings",)))


if __name__ == "__main__":
    main()
