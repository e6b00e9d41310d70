"""``mcp-lab``'s command line, in process: help for every option, --version, bad
numbers refused, and ``connect``'s snippets (the drivers' own for the agent CLIs)."""

from __future__ import annotations

import argparse
import json
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from mcp_lab.cli import connect
from mcp_lab.cli.main import build_parser
from mcp_lab.runners.clients import configs, drivers
from mcp_lab.runners.clients.pins import CLIENTS

URL = "http://127.0.0.1:18089/mcp"


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.append((name, child))
                found += [(f"{name} {n}", c) for n, c in _subparsers(child)]
    return found


def test_every_option_of_every_command_has_help_text() -> None:
    missing = []
    for name, parser in _subparsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help:
                missing.append(f"mcp-lab {name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser(with_clients=False).parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"mcp-lab {version('mcp-subscribe-lab')}"


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "--timeout", "-5"],
        ["probe", "--timeout", "0"],
        ["probe", "--timeout", "nan"],
        ["trigger", "--timeout", "0"],
        ["trigger", "--delay", "-1"],
    ],
)
def test_bad_numbers_of_seconds_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser(with_clients=False).parse_args(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "must be" in err or "is not a number of seconds" in err, err


def test_json_is_offered_by_every_command_with_an_answer() -> None:
    parsers = dict(_subparsers(build_parser()))
    for name in ("trigger", "reset", "report", "healthcheck", "status", "connect", "clients list"):
        options = {o for a in parsers[name]._actions for o in a.option_strings}
        assert "--json" in options, name


def test_connect_knows_the_clients_the_issue_names() -> None:
    assert set(connect.CLIENTS) == {
        "claude-code",
        "codex",
        "gemini-cli",
        "opencode",
        "copilot",
        "goose",
        "crush",
        "vscode",
        "cursor",
    }


@pytest.mark.parametrize(
    ("client", "config_part"),
    [
        ("claude-code", configs.claude_code_mcp),
        ("gemini-cli", configs.gemini_cli_mcp),
        ("opencode", configs.opencode_mcp),
        ("copilot", configs.copilot_mcp),
    ],
)
def test_an_agent_clis_snippet_is_what_its_config_writer_writes(
    client, config_part, tmp_path
) -> None:
    shown = connect.CLIENTS[client](URL)
    part = config_part(configs.Server(url=URL))
    assert json.loads(shown.snippet()) == part
    # and its client file's driver writes that very part into the config of a scored run
    dirs = drivers.RunDirs(tmp_path / "home", tmp_path / "work", URL, "http://127.0.0.1:1")
    drivers.templated(CLIENTS[client])("bin", dirs, "prompt", False)
    written = [json.loads(p.read_text()) for p in tmp_path.rglob("*.json")]
    key = next(iter(part))
    assert any(data.get(key) == part[key] for data in written), written


def test_codex_snippet_is_the_table_its_driver_appends(tmp_path: Path) -> None:
    snippet = connect.CLIENTS["codex"](URL).snippet()
    assert tomllib.loads(snippet) == {
        "mcp_servers": {"lab": {"url": URL, "default_tools_approval_mode": "approve"}}
    }
    dirs = drivers.RunDirs(tmp_path / "home", tmp_path / "work", URL, "http://127.0.0.1:1")
    drivers.templated(CLIENTS["codex"])("bin", dirs, "prompt", False)
    assert snippet in (tmp_path / "home" / ".codex" / "config.toml").read_text()


@pytest.mark.parametrize("client", ["goose", "crush", "vscode", "cursor"])
def test_every_other_snippet_parses_and_names_the_lab(client: str) -> None:
    shown = connect.CLIENTS[client](URL)
    parsed = yaml.safe_load(shown.snippet()) if shown.language == "yaml" else None
    if shown.language == "json":
        parsed = json.loads(shown.snippet())
    assert parsed is not None and URL in json.dumps(parsed)
    assert shown.start
