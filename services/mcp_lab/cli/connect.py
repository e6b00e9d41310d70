"""``mcp-lab connect CLIENT``: the configuration that points CLIENT at the running lab.

For the agent CLIs that ``mcp-lab clients run`` drives, the snippet comes from the
same functions its config writers use (``mcp_lab.runners.clients.configs``),
so what a person pastes is what the lab's own runs use. The others (Goose, Crush,
VS Code, Cursor) follow each client's documented configuration format.

Some clients need more than the snippet (``Connection.notes``). Gemini CLI connects to
no MCP server, user-level ones included, in a folder it does not trust: the lab is
then listed as Disabled and never contacted (0.61.0, the version ``mcp-lab clients``
pins: folder trust, ``security.folderTrust.enabled``, is on unless the settings turn it
off; ``~/.gemini/trustedFolders.json``, or ``GEMINI_CLI_TRUSTED_FOLDERS_PATH``, maps
folders to ``TRUST_FOLDER``, ``TRUST_PARENT`` or ``DO_NOT_TRUST``, the longest match
deciding; ``GEMINI_CLI_TRUST_WORKSPACE=true`` or ``--skip-trust`` trusts any folder for
one run, and a headless ``gemini -p`` in an untrusted folder exits instead). The notes
say whether the folder ``connect`` runs in is trusted, and how to trust it.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_lab.runners.clients import configs
from mcp_lab.runners.clients.configs import SERVER_NAME as NAME
from mcp_lab.runners.clients.configs import Server


@dataclass(frozen=True)
class Connection:
    """How one client is pointed at the lab."""

    title: str
    file: str  # where the snippet goes
    config: Any  # the snippet: JSON data, or lines of TOML / YAML
    language: str  # json, toml or yaml
    start: str  # the command that starts the client with it
    notes: list[str] = field(default_factory=list)  # what else the user must do

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
        gemini_trust(Path.cwd(), Path.home(), os.environ),
    )


def _gemini_trust_rule(folder: Path, rules: dict[str, Any]) -> tuple[str, str] | None:
    """The rule of a trustedFolders.json that decides for ``folder`` (the longest
    matching path, as Gemini CLI takes it), as (path, level)."""
    found: tuple[str, str] | None = None
    for path, level in rules.items():
        covers = Path(path).parent if level == "TRUST_PARENT" else Path(path)
        covers = covers.expanduser().resolve()
        if (folder == covers or covers in folder.parents) and (
            found is None or len(path) > len(found[0])
        ):
            found = (path, str(level))
    return found


def gemini_trust(folder: Path, home: Path, env: Mapping[str, str]) -> list[str]:
    """What to do about Gemini CLI's folder trust, for gemini started in ``folder``."""
    folder = folder.resolve()
    lead = (
        "Gemini CLI connects to MCP servers only in a folder it trusts: elsewhere "
        "`gemini mcp list` shows the lab as Disabled and gemini never contacts it."
    )
    try:
        settings = json.loads((home / ".gemini" / "settings.json").read_text())
        trust = settings["security"]["folderTrust"]["enabled"]
    except (OSError, ValueError, KeyError, TypeError):
        trust = True  # its default
    if trust is False:
        return [
            "Folder trust is off in ~/.gemini/settings.json (security.folderTrust.enabled "
            "false): gemini contacts the lab in any folder."
        ]
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return [
            lead,
            "GEMINI_CLI_TRUST_WORKSPACE=true is set here: a gemini started from this "
            "shell trusts its folder.",
        ]
    named = env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
    trust_file = Path(named) if named else home / ".gemini" / "trustedFolders.json"
    shown = named or "~/.gemini/trustedFolders.json"
    try:
        rules = json.loads(trust_file.read_text())
        rule = _gemini_trust_rule(folder, rules if isinstance(rules, dict) else {})
    except FileNotFoundError:
        rule = None
    except (OSError, ValueError) as exc:
        return [lead, f"{shown} could not be read here ({exc}): is {folder} in it?"]
    if rule is not None and rule[1] in ("TRUST_FOLDER", "TRUST_PARENT"):
        return [lead, f"This folder ({folder}) is trusted: {shown} has {rule[0]!r}: {rule[1]}."]
    now = (
        f"This folder ({folder}) is marked DO_NOT_TRUST in {shown}"
        if rule is not None and rule[1] == "DO_NOT_TRUST"
        else f"This folder ({folder}) is not trusted yet"
    )
    entry = json.dumps({str(folder): "TRUST_FOLDER"}, separators=(",", ":"))
    return [
        lead,
        f"{now}: start gemini here and answer 'Trust folder' (or /permissions later), "
        f"or add it to {shown}: {entry}",
        "For one run only: gemini --skip-trust, or GEMINI_CLI_TRUST_WORKSPACE=true "
        "(a headless gemini -p in an untrusted folder exits instead).",
    ]


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
    notes = [
        f"# {line}"
        for note in connection.notes
        for line in textwrap.wrap(note, 86, break_on_hyphens=False)
    ]
    return "\n".join(
        [
            f"# {connection.title} -> the lab at {url}",
            f"# in {connection.file}:",
            connection.snippet(),
            "",
            *notes,
            f"# then start it: {connection.start}",
            "# and read how far it got: mcp-lab report",
        ]
    )


def main(client: str, url: str, as_json: bool) -> int:
    """Print the configuration that points ``client`` at ``url`` (the lab the caller
    named on stderr)."""
    connection = CLIENTS[client](url)
    if as_json:
        data = {"client": client, "url": url, **connection.__dict__}
        print(json.dumps(data, indent=2))
    else:
        print(to_text(connection, url))
    return 0
