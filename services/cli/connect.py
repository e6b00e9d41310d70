"""``mcp-lab connect CLIENT``: the configuration that points CLIENT at the running lab.

For the agent CLIs that ``mcp-lab clients run`` drives, the snippet comes from the
same functions its config writers use (``services.runners.clients.configs``),
so what a person pastes is what the lab's own runs use. The others (Goose, Crush,
VS Code, Cursor) follow each client's documented configuration format.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.runners.clients import configs
from services.runners.clients.configs import SERVER_NAME as NAME
from services.runners.clients.configs import Server


@dataclass(frozen=True)
class Connection:
    """How one client is pointed at the lab."""

    title: str
    file: str  # where the snippet goes
    config: Any  # the snippet: JSON data, or lines of TOML / YAML
    language: str  # json, toml or yaml
    start: str  # the command that starts the client with it

    def snippet(self) -> str:
        if self.language == "json":
            return json.dumps(self.config, indent=2)
        return "\n".join(self.config)


def _claude_code(url: str) -> Connection:
    return Connection(
        "Claude Code",
        "mcp.json (any file; its path goes to --mcp-config)",
        configs.claude_code_mcp(Server(url=url)),
        "json",
        "claude --mcp-config mcp.json",
    )


def _gemini_cli(url: str) -> Connection:
    return Connection(
        "Gemini CLI",
        "~/.gemini/settings.json, or .gemini/settings.json in the project (merge mcpServers)",
        configs.gemini_cli_mcp(Server(url=url)),
        "json",
        "gemini",
    )


def _codex(url: str) -> Connection:
    return Connection(
        "Codex CLI",
        "~/.codex/config.toml (append)",
        configs.codex_mcp(Server(url=url)),
        "toml",
        "codex",
    )


def _opencode(url: str) -> Connection:
    return Connection(
        "OpenCode",
        "opencode.json in the project folder (merge mcp)",
        configs.opencode_mcp(Server(url=url)),
        "json",
        "opencode",
    )


def _copilot(url: str) -> Connection:
    return Connection(
        "GitHub Copilot CLI",
        "~/.copilot/mcp-config.json (merge mcpServers)",
        configs.copilot_mcp(Server(url=url)),
        "json",
        "copilot",
    )


def _goose(url: str) -> Connection:
    return Connection(
        "Goose",
        "~/.config/goose/config.yaml (merge extensions); for one session only: "
        f"goose session --with-streamable-http-extension {url}",
        [
            "extensions:",
            f"  {NAME}:",
            "    enabled: true",
            "    type: streamable_http",
            f"    name: {NAME}",
            f"    uri: {url}",
            "    timeout: 300",
        ],
        "yaml",
        "goose session",
    )


def _crush(url: str) -> Connection:
    return Connection(
        "Crush",
        "crush.json in the project folder (merge mcp)",
        {"$schema": "https://charm.land/crush.json", "mcp": {NAME: {"type": "http", "url": url}}},
        "json",
        "crush",
    )


def _vscode(url: str) -> Connection:
    return Connection(
        "VS Code (Copilot agent mode)",
        ".vscode/mcp.json in the workspace (merge servers); start the server from that file",
        {"servers": {NAME: {"type": "http", "url": url}}},
        "json",
        "code .",
    )


def _cursor(url: str) -> Connection:
    return Connection(
        "Cursor",
        ".cursor/mcp.json in the project, or ~/.cursor/mcp.json (merge mcpServers)",
        {"mcpServers": {NAME: {"url": url}}},
        "json",
        "cursor .",
    )


CLIENTS: dict[str, Callable[[str], Connection]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini-cli": _gemini_cli,
    "opencode": _opencode,
    "copilot": _copilot,
    "goose": _goose,
    "crush": _crush,
    "vscode": _vscode,
    "cursor": _cursor,
}


def to_text(connection: Connection, url: str) -> str:
    return "\n".join(
        [
            f"# {connection.title} -> the lab at {url}",
            f"# in {connection.file}:",
            connection.snippet(),
            "",
            f"# then start it: {connection.start}",
            "# and read how far it got: mcp-lab report",
        ]
    )


def main(client: str, url: str, source: str, as_json: bool) -> int:
    """Print the configuration that points ``client`` at ``url``."""
    print(f"mcp-lab: lab at {url} ({source})", file=sys.stderr)
    connection = CLIENTS[client](url)
    if as_json:
        data = {"client": client, "url": url, **connection.__dict__}
        print(json.dumps(data, indent=2))
    else:
        print(to_text(connection, url))
    return 0
