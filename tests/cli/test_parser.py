"""``mcp-lab``'s command line, in process: help for every option, --version, bad
numbers refused, and ``connect``'s snippets (the drivers' own for the agent CLIs)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from mcp_lab.cli import connect
from mcp_lab.cli.main import build_parser
from mcp_lab.runners.clients import configs, definition, drivers
from mcp_lab.runners.clients.connecting import Connection, Here
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


def shown(client: str) -> Connection:
    """What ``connect CLIENT`` says for the lab at URL (run in a folder of no consequence)."""
    return connect.connection(connect.CLIENTS[client], URL, Here(Path("/"), Path("/"), {}))


def test_connect_offers_every_client_file_with_a_connect_table() -> None:
    with_table = {c.name for c in definition.every_file().values() if c.connect is not None}
    assert set(connect.CLIENTS) == with_table
    assert with_table == {
        # the nine of the first connect
        "claude-code", "codex", "gemini-cli", "opencode", "copilot", "goose", "crush",
        "vscode", "cursor",
        # the other agent CLIs with a config writer
        "qwen-code", "continue", "cline", "factory-droid", "kilo", "kimi-cli",
    }  # fmt: skip
    parsers = dict(_subparsers(build_parser(with_clients=False)))
    choices = next(a.choices for a in parsers["connect"]._actions if a.dest == "client")
    assert list(choices or []) == list(connect.CLIENTS)


def test_every_client_file_with_a_config_writer_over_http_is_connectable() -> None:
    for client in CLIENTS.values():
        if client.config_writer in configs.SNIPPETS and "http" in client.transports:
            assert client.connect is not None, client.name
            assert client.connect.writer == client.config_writer, client.name


WITH_WRITERS = sorted(n for n, c in connect.CLIENTS.items() if c.connect and c.connect.writer)


@pytest.mark.parametrize("client", [n for n in WITH_WRITERS if n != "codex"])
def test_an_agent_clis_snippet_is_what_its_config_writer_writes(
    client: str, tmp_path: Path
) -> None:
    writer = CLIENTS[client].config_writer
    part = configs.SNIPPETS[writer](configs.Server(url=URL))
    assert json.loads(shown(client).snippet()) == part
    # and its client file's driver writes that very part into the config of a scored run
    dirs = drivers.RunDirs(tmp_path / "home", tmp_path / "work", URL, "http://127.0.0.1:1")
    drivers.templated(CLIENTS[client])("bin", dirs, "prompt", False)
    written = []
    for path in tmp_path.rglob("*"):
        try:
            written.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a folder, or not JSON
    key = next(iter(part))
    assert any(isinstance(d, dict) and d.get(key) == part[key] for d in written), written


def test_codex_snippet_is_the_table_its_driver_appends(tmp_path: Path) -> None:
    snippet = shown("codex").snippet()
    assert tomllib.loads(snippet) == {
        "mcp_servers": {"lab": {"url": URL, "default_tools_approval_mode": "approve"}}
    }
    dirs = drivers.RunDirs(tmp_path / "home", tmp_path / "work", URL, "http://127.0.0.1:1")
    drivers.templated(CLIENTS["codex"])("bin", dirs, "prompt", False)
    assert snippet in (tmp_path / "home" / ".codex" / "config.toml").read_text()


@pytest.mark.parametrize("client", ["goose", "crush", "vscode", "cursor"])
def test_every_other_snippet_parses_and_names_the_lab(client: str) -> None:
    made = shown(client)
    table = connect.CLIENTS[client].connect
    assert table is not None and table.template is not None and table.writer is None
    parsed = yaml.safe_load(made.snippet()) if made.language == "yaml" else None
    if made.language == "json":
        parsed = json.loads(made.snippet())
    assert parsed is not None and URL in json.dumps(parsed)
    assert made.start


def test_the_parser_reads_the_client_files_only_for_connect() -> None:
    # `up` and the processes it starts build the same parser: connect's choices wait
    code = (
        "import sys; from mcp_lab.cli.main import build_parser; "
        "build_parser(with_clients=False).parse_args(['status']); "
        "print('mcp_lab.runners.clients.definition' in sys.modules)"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "False"
