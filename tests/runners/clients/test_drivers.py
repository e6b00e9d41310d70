"""A client file becomes a command line: its writer's config for http and for stdio,
its argv and env filled in, the lab's place in the environment."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.configs import Server
from mcp_lab.runners.clients.definition import parse
from mcp_lab.runners.clients.pins import CLIENTS

URL, MODEL = "http://127.0.0.1:7/mcp", "http://127.0.0.1:8"
COMMAND = ["python3", "-m", "mcp_lab", "server", "--transport", "stdio"]


def dirs(tmp_path: Path, stdio: bool = False) -> drivers.RunDirs:
    server = Server(command=COMMAND) if stdio else Server()
    url = "" if stdio else URL
    return drivers.RunDirs(tmp_path / "home", tmp_path / "work", url, MODEL, server)


def test_the_templates_are_filled_and_the_lab_is_in_the_environment(tmp_path: Path) -> None:
    run = drivers.templated(CLIENTS["claude-code"])("claude", dirs(tmp_path), "hi {x}", False)
    assert run.argv[:3] == ["claude", "-p", "hi {x}"]  # a prompt's braces stay as they are
    assert run.argv[run.argv.index("--mcp-config") + 1] == str(tmp_path / "work" / "mcp.json")
    assert run.env["ANTHROPIC_BASE_URL"] == MODEL and run.env[drivers.URL_ENV] == URL
    again = drivers.templated(CLIENTS["claude-code"])("claude", dirs(tmp_path), "more", True)
    assert again.argv[:2] == ["claude", "-c"]


def test_over_stdio_each_writer_names_the_command_the_client_starts(tmp_path: Path) -> None:
    for name in ("claude-code", "gemini-cli", "copilot", "opencode", "codex"):
        where = tmp_path / name
        run = drivers.templated(CLIENTS[name])("bin", dirs(where, stdio=True), "p", False)
        assert run.env[drivers.SERVER_COMMAND_ENV] == shlex.join(COMMAND)
        written = [p for p in where.rglob("*") if p.suffix in (".json", ".toml")]
        text = "".join(p.read_text() for p in written)
        assert "streamable" not in text and URL not in text, name
        if name == "codex":
            config = tomllib.loads((where / "home" / ".codex" / "config.toml").read_text())
            entry = config["mcp_servers"]["lab"]
            assert [entry["command"], *entry["args"]] == COMMAND
        else:
            jsons = [json.loads(p.read_text()) for p in written if p.suffix == ".json"]
            configs = json.dumps(jsons)
            assert all(json.dumps(part) in configs for part in COMMAND), name


def test_a_common_mcp_servers_file_goes_where_the_client_file_says(tmp_path: Path) -> None:
    client = parse(
        {
            "name": "mine",
            "model": {"api": "openai-chat"},
            "install": {"command": "mine"},
            "config": {"writer": "mcp-servers-json", "path": "{home}/.mine/mcp.json"},
            "run": {"argv": ["{binary}", "--config", "{config}", "{prompt}"]},
        },
        "mine.toml",
    )
    run = drivers.templated(client)("mine", dirs(tmp_path), "go", False)
    written = tmp_path / "home" / ".mine" / "mcp.json"
    assert run.argv == ["mine", "--config", str(written), "go"]
    assert json.loads(written.read_text()) == {
        "mcpServers": {"lab": {"type": "http", "url": URL}}
    }
