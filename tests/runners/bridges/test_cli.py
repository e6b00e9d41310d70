"""``mcp-lab bridges``' command line, in process: what it lists, and bad input refused
with a clear error before anything runs (the runs themselves: tests/system/test_bridges.py)."""

from __future__ import annotations

import json

import pytest

from mcp_lab.cli.main import build_parser
from mcp_lab.protocol import Transport
from mcp_lab.runners.bridges.specs import BRIDGES, direction


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def test_list_names_every_bridge_with_its_directions(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bridges", "list", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(listed) == set(BRIDGES)
    assert listed["mcp-remote"]["directions"] == ["stdio->HTTP", "stdio->SSE"]
    assert all(row["installable"] for row in listed.values())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--bridge", "nope"], "unknown bridge(s) ['nope']"),
        (["--version", "mcp-remote"], "expected NAME=VERSION"),
        (["--version", "nope=1"], "unknown bridge 'nope'"),
        (["--version", "fastmcp-proxy=1"], "is not installed by version"),
        (["--scenario", "nope"], "unknown scenario 'nope'"),
        (["--direction", "stdio-HTTP"], "is no direction"),
        (["--direction", "HTTP->ftp"], "is no direction"),
        (["--timeout", "0"], "--timeout (seconds) and --jobs must be positive"),
        (["--timeout", "nan"], "--timeout (seconds) and --jobs must be positive"),
        (["--timeout", "inf"], "--timeout (seconds) and --jobs must be positive"),
        (["--jobs", "0"], "--timeout (seconds) and --jobs must be positive"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["bridges", "run", *argv]) == 2
    assert said in capsys.readouterr().err


def test_a_direction_reads_client_side_first() -> None:
    way = direction("stdio->HTTP")
    assert (way.client, way.lab) == (Transport.STDIO, Transport.STREAMABLE_HTTP)
    assert way.name == "stdio->HTTP"
