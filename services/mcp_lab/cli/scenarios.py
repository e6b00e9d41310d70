"""``mcp-lab scenarios``: the scenarios the lab can play, one line each."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``scenarios`` to ``mcp-lab``'s subcommands."""
    scenarios = sub.add_parser(
        "scenarios", help="list the scenarios the lab can play (mcp-lab up --scenario NAME)"
    )
    scenarios.add_argument("--format", choices=["table", "json"], default="table",
                           help="one line each (default), or JSON")  # fmt: skip
    scenarios.set_defaults(func=_cmd_scenarios)


def _cmd_scenarios(args: argparse.Namespace) -> int:
    from mcp_lab.scenarios import registry

    every = registry.every()
    if args.format == "json":
        rows = [
            {
                "name": s.name,
                "summary": s.summary,
                "resource": s.read_uri,
                "default": s.name == registry.DEFAULT,
                "updates": [{"after": a.after, "action": a.kind, "uri": a.uri} for a in s.timeline],
            }
            for s in every
        ]
        print(json.dumps({"scenarios": rows}, indent=2))
        return 0
    width = max(len(s.name) for s in every)
    for scenario in every:
        mark = " (default)" if scenario.name == registry.DEFAULT else ""
        print(f"{scenario.name:<{width}}  {scenario.summary}{mark}")
    return 0
