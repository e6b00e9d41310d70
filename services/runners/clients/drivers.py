"""How to point each agent CLI at the lab and at the scripted model, and run it.

A driver writes the CLI's config into the run's own HOME (or working directory) and
returns the command line and environment variables for one turn: the first, or a later
one that continues the same session with the CLI's own continue flag (``resume``). The
runner does the rest.

The part of each config that points the CLI at the lab is its own function (``*_mcp``),
which ``mcp-lab connect`` prints for a person's own CLI, so both always agree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_NAME = "lab"
# The scored run's first turn is the scenario's (services.scenarios.scenario.Play).
# Its later turn (the CLI's continue flag): asks for nothing.
CONTINUE_PROMPT = "Thanks. Please wrap up."
# The pull run: the model is asked to read again (never a level). ``{uri}``: the resource.
PULL_PROMPT = (
    "Read the MCP resource {uri} of the MCP server 'lab', read it again, and tell me its status."
)


@dataclass(frozen=True)
class RunDirs:
    """The directories and endpoints of one run."""

    home: Path
    workdir: Path
    mcp_url: str
    model_url: str


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str]


# binary, directories, prompt, resume (continue the last session) -> what to run
Driver = Callable[[str, RunDirs, str, bool], Invocation]


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


# The model key the CLIs are given (the scripted model takes any).
_API_KEY = "lab-offline"


def claude_code_mcp(mcp_url: str) -> dict[str, Any]:
    """Claude Code's ``--mcp-config`` file: the lab over Streamable HTTP."""
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": mcp_url}}}


def claude_code(binary: str, dirs: RunDirs, prompt: str, resume: bool = False) -> Invocation:
    """Claude Code in ``-p`` mode (``-c`` continues), Anthropic Messages, the lab over
    Streamable HTTP."""
    config = dirs.workdir / "mcp.json"
    _write_json(config, claude_code_mcp(dirs.mcp_url))
    allowed = f"ReadMcpResourceTool,ListMcpResourcesTool,mcp__{SERVER_NAME}"
    return Invocation(
        argv=[
            binary,
            *(["-c"] if resume else []),
            "-p",
            prompt,
            "--model",
            "claude-sonnet-4-5",
            "--mcp-config",
            str(config),
            "--strict-mcp-config",
            "--allowedTools",
            allowed,
        ],
        env={
            "ANTHROPIC_BASE_URL": dirs.model_url,
            "ANTHROPIC_API_KEY": _API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        },
    )


def claude_code_interactive(binary: str, dirs: RunDirs) -> Invocation:
    """Claude Code's interactive UI (for a terminal, :mod:`services.runners.clients.terminal`),
    as the ``-p`` driver points it at the lab and the model. Its first-run dialogs are
    answered in ``~/.claude.json`` beforehand: onboarding done, the working directory
    trusted, the model key approved (it compares the key's last 20 characters)."""
    config = dirs.workdir / "mcp.json"
    _write_json(config, claude_code_mcp(dirs.mcp_url))
    _write_json(
        dirs.home / ".claude.json",
        {
            "hasCompletedOnboarding": True,
            "projects": {str(dirs.workdir): {"hasTrustDialogAccepted": True}},
            "customApiKeyResponses": {"approved": [_API_KEY[-20:]], "rejected": []},
        },
    )
    return Invocation(
        argv=[
            binary,
            "--model",
            "claude-sonnet-4-5",
            "--mcp-config",
            str(config),
            "--strict-mcp-config",
            "--allowedTools",
            f"ReadMcpResourceTool,ListMcpResourcesTool,mcp__{SERVER_NAME},TaskList,TodoWrite",
        ],
        env={
            "ANTHROPIC_BASE_URL": dirs.model_url,
            "ANTHROPIC_API_KEY": _API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "TERM": "xterm-256color",
        },
    )


# The CLIs whose interactive UI the runner can drive (the attached scenario).
INTERACTIVE_DRIVERS: dict[str, Callable[[str, RunDirs], Invocation]] = {
    "claude-code": claude_code_interactive,
}


def gemini_cli_mcp(mcp_url: str) -> dict[str, Any]:
    """Gemini CLI's ``settings.json`` entry: the lab over Streamable HTTP, trusted."""
    return {"mcpServers": {SERVER_NAME: {"url": mcp_url, "type": "http", "trust": True}}}


def gemini_cli(binary: str, dirs: RunDirs, prompt: str, resume: bool = False) -> Invocation:
    """Gemini CLI with ``-p --yolo`` (``--resume latest`` continues), Gemini API, the lab
    over Streamable HTTP (trusted)."""
    gemini = dirs.home / ".gemini"
    _write_json(
        gemini / "settings.json",
        {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            **gemini_cli_mcp(dirs.mcp_url),
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        },
    )
    _write_json(gemini / "trustedFolders.json", {str(dirs.workdir): "TRUST_FOLDER"})
    return Invocation(
        argv=[
            binary,
            *(["--resume", "latest"] if resume else []),
            "-p",
            prompt,
            "--yolo",
            "-m",
            "gemini-2.5-flash",
        ],
        env={
            "GOOGLE_GEMINI_BASE_URL": dirs.model_url,
            "GEMINI_API_KEY": "lab-offline",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        },
    )


def codex_mcp(mcp_url: str) -> list[str]:
    """Codex CLI's ``config.toml`` table (its lines): the lab over HTTP, its tools approved."""
    return [
        f"[mcp_servers.{SERVER_NAME}]",
        f'url = "{mcp_url}"',
        'default_tools_approval_mode = "approve"',
    ]


def codex(binary: str, dirs: RunDirs, prompt: str, resume: bool = False) -> Invocation:
    """Codex CLI ``exec`` (``exec resume --last`` continues), OpenAI Responses from a
    custom provider, the lab over HTTP."""
    codex_home = dirs.home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        "\n".join(
            [
                'model = "gpt-5-codex"',
                'model_provider = "lab"',
                'approval_policy = "never"',
                'sandbox_mode = "read-only"',
                "",
                "[model_providers.lab]",
                'name = "lab scripted model"',
                f'base_url = "{dirs.model_url}/v1"',
                'wire_api = "responses"',
                "",
                *codex_mcp(dirs.mcp_url),
                "",
            ]
        )
    )
    return Invocation(
        argv=[
            binary,
            "exec",
            *(["resume", "--last"] if resume else []),
            "--skip-git-repo-check",
            prompt,
        ],
        env={"CODEX_HOME": str(codex_home)},
    )


def opencode_mcp(mcp_url: str) -> dict[str, Any]:
    """OpenCode's ``opencode.json`` entry: the lab as a remote server, without OAuth."""
    return {
        "mcp": {SERVER_NAME: {"type": "remote", "url": mcp_url, "enabled": True, "oauth": False}}
    }


def opencode(binary: str, dirs: RunDirs, prompt: str, resume: bool = False) -> Invocation:
    """OpenCode ``run`` (``run -c`` continues), an OpenAI-compatible provider (Chat
    Completions), the lab remote."""
    _write_json(
        dirs.workdir / "opencode.json",
        {
            "provider": {
                "lab": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "lab scripted model",
                    "options": {"baseURL": f"{dirs.model_url}/v1", "apiKey": "lab-offline"},
                    "models": {"scripted": {"name": "scripted", "tool_call": True}},
                }
            },
            "model": "lab/scripted",
            **opencode_mcp(dirs.mcp_url),
            "autoupdate": False,
            "share": "disabled",
        },
    )
    return Invocation(
        argv=[binary, "run", *(["-c"] if resume else []), prompt],
        env={"OPENCODE_DISABLE_AUTOUPDATE": "true", "OPENCODE_DISABLE_MODELS_FETCH": "true"},
    )


def copilot_mcp(mcp_url: str) -> dict[str, Any]:
    """GitHub Copilot CLI's ``mcp-config.json``: the lab over HTTP, all its tools."""
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": mcp_url, "tools": ["*"]}}}


def copilot(binary: str, dirs: RunDirs, prompt: str, resume: bool = False) -> Invocation:
    """GitHub Copilot CLI ``-p`` (``--continue`` continues) in offline mode with a custom
    provider (Chat Completions)."""
    _write_json(dirs.home / ".copilot" / "mcp-config.json", copilot_mcp(dirs.mcp_url))
    return Invocation(
        argv=[binary, *(["--continue"] if resume else []), "-p", prompt, "--allow-all-tools"],
        env={
            "COPILOT_OFFLINE": "true",
            "COPILOT_PROVIDER_BASE_URL": f"{dirs.model_url}/v1",
            "COPILOT_PROVIDER_API_KEY": "lab-offline",
            "COPILOT_MODEL": "scripted",
            "COPILOT_AUTO_UPDATE": "false",
        },
    )


AGENT_DRIVERS: dict[str, Driver] = {
    "claude-code": claude_code,
    "gemini-cli": gemini_cli,
    "codex": codex,
    "opencode": opencode,
    "copilot": copilot,
}
