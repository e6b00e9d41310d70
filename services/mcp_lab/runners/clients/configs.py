"""Config writers: how each shape of client configuration points a client at the lab.

A client file names one (``[config] writer``); each writes the client's config into the
run's own HOME or working directory and returns the file it wrote (``{config}`` in the
run's command line), or None. The lab is one MCP server called ``lab``, reached over
HTTP (its URL) or over stdio (a command the client starts). The writers of the built-in
CLIs also point them at the scripted model where their config holds that (Codex,
OpenCode); the others take it from the environment their client file sets.

The part of each config that names the lab is a function of its own (``*_mcp``),
listed by writer in :data:`SNIPPETS`: a client file whose ``[connect] writer`` names
its writer gets that part from ``mcp-lab connect`` for a person's own copy, so both
always agree (:mod:`mcp_lab.runners.clients.connecting`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVER_NAME = "lab"
# The model key the CLIs are given (the scripted model takes any).
API_KEY = "lab-offline"


@dataclass(frozen=True)
class Server:
    """The lab as a client is to reach it: a URL (http) or a command (stdio)."""

    url: str | None = None
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def stdio(self) -> bool:
        return self.url is None


@dataclass(frozen=True)
class Where:
    """The run's directories and the scripted model's URL."""

    home: Path
    workdir: Path
    model_url: str


# client file's [config] path (mcp-servers-json), where, server -> the file written
Writer = Callable[[str | None, Where, Server], Path | None]


def _write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def _stdio_entry(server: Server) -> dict[str, Any]:
    return {"command": server.command[0], "args": server.command[1:], "env": server.env}


def mcp_servers(server: Server, **http: Any) -> dict[str, Any]:
    """The common ``{"mcpServers": {"lab": ...}}`` shape: ``{"type": "http", "url"}``
    (with ``http``'s keys) or ``{"command", "args", "env"}``."""
    if server.stdio:
        return {"mcpServers": {SERVER_NAME: {"type": "stdio", **_stdio_entry(server)}}}
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": server.url, **http}}}


def claude_code_mcp(server: Server) -> dict[str, Any]:
    """Claude Code's ``--mcp-config`` file."""
    return mcp_servers(server)


def gemini_cli_mcp(server: Server) -> dict[str, Any]:
    """Gemini CLI's ``settings.json`` entry, trusted (no confirmation per tool)."""
    if server.stdio:
        return {"mcpServers": {SERVER_NAME: {**_stdio_entry(server), "trust": True}}}
    return {"mcpServers": {SERVER_NAME: {"url": server.url, "type": "http", "trust": True}}}


def codex_mcp(server: Server) -> list[str]:
    """Codex CLI's ``config.toml`` table (its lines), its tools approved."""
    lines = [f"[mcp_servers.{SERVER_NAME}]"]
    if server.stdio:
        lines += [
            f"command = {json.dumps(server.command[0])}",
            f"args = {json.dumps(server.command[1:])}",
        ]
        if server.env:
            pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in server.env.items())
            lines.append(f"env = {{ {pairs} }}")
    else:
        lines.append(f"url = {json.dumps(server.url)}")
    return [*lines, 'default_tools_approval_mode = "approve"']


def opencode_mcp(server: Server) -> dict[str, Any]:
    """OpenCode's ``opencode.json`` entry: a remote server without OAuth, or a local one."""
    if server.stdio:
        local = {"type": "local", "command": server.command, "environment": server.env}
        return {"mcp": {SERVER_NAME: {**local, "enabled": True}}}
    remote = {"type": "remote", "url": server.url, "enabled": True, "oauth": False}
    return {"mcp": {SERVER_NAME: remote}}


def copilot_mcp(server: Server) -> dict[str, Any]:
    """GitHub Copilot CLI's ``mcp-config.json``, all its tools allowed."""
    if server.stdio:
        local = {"type": "local", **_stdio_entry(server), "tools": ["*"]}
        return {"mcpServers": {SERVER_NAME: local}}
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": server.url, "tools": ["*"]}}}


def qwen_code_mcp(server: Server) -> dict[str, Any]:
    """Qwen Code's ``--mcp-config`` file: Streamable HTTP is ``httpUrl`` (its ``url`` is
    the old SSE transport), trusted (no confirmation per tool)."""
    if server.stdio:
        return {"mcpServers": {SERVER_NAME: {**_stdio_entry(server), "trust": True}}}
    return {"mcpServers": {SERVER_NAME: {"httpUrl": server.url, "trust": True}}}


def continue_mcp(server: Server) -> dict[str, Any]:
    """Continue CLI's ``mcpServers`` list (its config is YAML; JSON is YAML too)."""
    if server.stdio:
        return {"mcpServers": [{"name": SERVER_NAME, **_stdio_entry(server)}]}
    return {"mcpServers": [{"name": SERVER_NAME, "type": "streamable-http", "url": server.url}]}


def cline_mcp(server: Server) -> dict[str, Any]:
    """Cline CLI's ``cline_mcp_settings.json``: each server's ``transport``."""
    if server.stdio:
        stdio = {"type": "stdio", "command": server.command[0], "args": server.command[1:]}
        return {"mcpServers": {SERVER_NAME: {"transport": stdio, "env": server.env}}}
    return {
        "mcpServers": {SERVER_NAME: {"transport": {"type": "streamableHttp", "url": server.url}}}
    }


def factory_droid_mcp(server: Server) -> dict[str, Any]:
    """Factory Droid's ``~/.factory/mcp.json`` (as ``droid mcp add`` writes it), over
    HTTP without OAuth."""
    return mcp_servers(server, oauth=False)


def _claude_code(_: str | None, where: Where, server: Server) -> Path:
    return _write_json(where.workdir / "mcp.json", claude_code_mcp(server))


def _gemini_cli(_: str | None, where: Where, server: Server) -> Path:
    gemini = where.home / ".gemini"
    _write_json(gemini / "trustedFolders.json", {str(where.workdir): "TRUST_FOLDER"})
    return _write_json(
        gemini / "settings.json",
        {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            **gemini_cli_mcp(server),
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        },
    )


def _codex(_: str | None, where: Where, server: Server) -> Path:
    codex_home = where.home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = codex_home / "config.toml"
    lines = [
        'model = "gpt-5-codex"',
        'model_provider = "lab"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        "",
        "[model_providers.lab]",
        'name = "lab scripted model"',
        f'base_url = "{where.model_url}/v1"',
        'wire_api = "responses"',
        "",
        *codex_mcp(server),
        "",
    ]
    config.write_text("\n".join(lines))
    return config


def _opencode(_: str | None, where: Where, server: Server) -> Path:
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "lab scripted model",
        "options": {"baseURL": f"{where.model_url}/v1", "apiKey": API_KEY},
        "models": {"scripted": {"name": "scripted", "tool_call": True}},
    }
    return _write_json(
        where.workdir / "opencode.json",
        {
            "provider": {"lab": provider},
            "model": "lab/scripted",
            **opencode_mcp(server),
            "autoupdate": False,
            "share": "disabled",
        },
    )


def _copilot(_: str | None, where: Where, server: Server) -> Path:
    return _write_json(where.home / ".copilot" / "mcp-config.json", copilot_mcp(server))


def _qwen_code(_: str | None, where: Where, server: Server) -> Path:
    # Its default tool settings: its MCP tools are deferred, behind tool_search + tool_call.
    _write_json(where.home / ".qwen" / "settings.json", {"telemetry": {"enabled": False}})
    return _write_json(where.workdir / "mcp.json", qwen_code_mcp(server))


def _continue(_: str | None, where: Where, server: Server) -> Path:
    model = {
        "name": "scripted",
        "provider": "openai",
        "model": "gpt-4o",
        "apiBase": f"{where.model_url}/v1",
        "apiKey": API_KEY,
        "roles": ["chat"],
    }
    config = {"name": "lab", "version": "1.0.0", "schema": "v1", "models": [model]}
    return _write_json(where.workdir / "continue.yaml", {**config, **continue_mcp(server)})


def _cline(_: str | None, where: Where, server: Server) -> Path:
    settings = where.home / ".cline" / "data" / "settings"
    compatible = {"provider": "openai-compatible", "apiKey": API_KEY, "model": "scripted",
                  "baseUrl": f"{where.model_url}/v1"}  # fmt: skip
    chosen = {
        "settings": compatible,
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "tokenSource": "manual",
    }
    providers = {"version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
                 "providers": {"openai-compatible": chosen}}  # fmt: skip
    _write_json(settings / "providers.json", providers)
    return _write_json(settings / "cline_mcp_settings.json", cline_mcp(server))


def _factory_droid(_: str | None, where: Where, server: Server) -> Path:
    # A custom model (no sign-in): `droid exec -m custom:scripted` speaks Chat Completions.
    model = {"model": "scripted", "displayName": "scripted", "baseUrl": f"{where.model_url}/v1",
             "apiKey": API_KEY, "provider": "generic-chat-completion-api",
             "maxOutputTokens": 4096}  # fmt: skip
    factory = where.home / ".factory"
    _write_json(factory / "settings.json", {"customModels": [model]})
    return _write_json(factory / "mcp.json", factory_droid_mcp(server))


def _mcp_servers_json(path: str | None, where: Where, server: Server) -> Path:
    assert path is not None  # the client file's loader requires it for this writer
    return _write_json(Path(path), mcp_servers(server))


def _env_only(_: str | None, __: Where, ___: Server) -> None:
    """Nothing written: the client reads ``MCP_LAB_URL`` / ``MCP_LAB_SERVER_COMMAND``."""
    return None


WRITERS: dict[str, Writer] = {
    "claude-code": _claude_code,
    "gemini-cli": _gemini_cli,
    "codex": _codex,
    "opencode": _opencode,
    "copilot": _copilot,
    "qwen-code": _qwen_code,
    "continue": _continue,
    "cline": _cline,
    "factory-droid": _factory_droid,
    "mcp-servers-json": _mcp_servers_json,
    "env": _env_only,
}

# The writers whose part that names the lab is a snippet a person can paste, by writer
# name: JSON data, or the lines of a TOML table (Codex's).
SNIPPETS: dict[str, Callable[[Server], Any]] = {
    "claude-code": claude_code_mcp,
    "gemini-cli": gemini_cli_mcp,
    "codex": codex_mcp,
    "opencode": opencode_mcp,
    "copilot": copilot_mcp,
    "qwen-code": qwen_code_mcp,
    "continue": continue_mcp,
    "cline": cline_mcp,
    "factory-droid": factory_droid_mcp,
    "mcp-servers-json": mcp_servers,
}
