"""How a client file becomes a command line: its config written by its writer
(:mod:`mcp_lab.runners.clients.configs`), its ``argv`` (or ``continue``) and ``env``
filled in for one run (:mod:`mcp_lab.runners.clients.definition`).

A driver writes the client's config into the run's own HOME (or working directory)
and returns the command line and environment variables for one turn: the first, or a
later one that continues the same session with the client's own continue flag
(``resume``). The runner does the rest.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mcp_lab.runners.clients.configs import API_KEY, SERVER_NAME, WRITERS, Server, Where
from mcp_lab.runners.clients.configs import claude_code_mcp as _claude_code_mcp
from mcp_lab.runners.clients.definition import ClientDef

# The scored run's first turn is the scenario's (mcp_lab.scenarios.scenario.Play).
# Its later turn (the client's continue flag): asks for nothing.
CONTINUE_PROMPT = "Thanks. Please wrap up."
# The pull run: the model is asked to read again (never a level). ``{uri}``: the resource.
PULL_PROMPT = (
    "Read the MCP resource {uri} of the MCP server 'lab', read it again, and tell me its status."
)
URL_ENV = "MCP_LAB_URL"
SERVER_COMMAND_ENV = "MCP_LAB_SERVER_COMMAND"


@dataclass(frozen=True)
class RunDirs:
    """The directories and endpoints of one run: the lab over http (``mcp_url``) or
    stdio (``server``'s command), and the scripted model."""

    home: Path
    workdir: Path
    mcp_url: str
    model_url: str
    server: Server = field(default_factory=Server)

    def lab_server(self) -> Server:
        """The lab as the client's config names it."""
        return self.server if self.server.command else Server(url=self.mcp_url)

    def lab_env(self) -> dict[str, str]:
        """``MCP_LAB_URL`` (http) or ``MCP_LAB_SERVER_COMMAND`` (stdio)."""
        if self.server.command:
            return {SERVER_COMMAND_ENV: shlex.join(self.server.command)}
        return {URL_ENV: self.mcp_url}


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str]


# binary, directories, prompt, resume (continue the last session) -> what to run
Driver = Callable[[str, RunDirs, str, bool], Invocation]


def templated(client: ClientDef) -> Driver:
    """The driver of a client file: its writer's config, its argv and env filled in."""

    def drive(binary: str, dirs: RunDirs, prompt: str, resume: bool) -> Invocation:
        server = dirs.lab_server()
        values = {
            "binary": binary,
            "prompt": prompt,
            "home": str(dirs.home),
            "workdir": str(dirs.workdir),
            "model_url": dirs.model_url,
            "server": SERVER_NAME,
            "url": dirs.mcp_url,
            "server_command": shlex.join(server.command),
            "here": client.here,
            "config": "",
        }
        path = client.config_path.format_map(values) if client.config_path else None
        written = WRITERS[client.config_writer](path, Where(dirs.home, dirs.workdir,
                                                            dirs.model_url), server)  # fmt: skip
        values["config"] = str(written) if written is not None else ""
        template = client.continue_argv if resume and client.continue_argv else client.argv
        argv = [part.format_map(values) for part in template]
        env = {key: value.format_map(values) for key, value in client.env.items()}
        return Invocation(argv, {**dirs.lab_env(), **env})

    return drive


def claude_code_interactive(binary: str, dirs: RunDirs) -> Invocation:
    """Claude Code's interactive UI (for a terminal, :mod:`mcp_lab.runners.clients.terminal`),
    as its client file points it at the lab and the model. Its first-run dialogs are
    answered in ``~/.claude.json`` beforehand: onboarding done, the working directory
    trusted, the model key approved (it compares the key's last 20 characters)."""
    config = dirs.workdir / "mcp.json"
    config.write_text(json.dumps(_claude_code_mcp(dirs.lab_server()), indent=2) + "\n")
    (dirs.home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "projects": {str(dirs.workdir): {"hasTrustDialogAccepted": True}},
                "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
            },
            indent=2,
        )
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
            "ANTHROPIC_API_KEY": API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "TERM": "xterm-256color",
        },
    )


# The interactive procedures a client file may name (``[run] interactive``): the UIs
# the runner can drive under a pseudo-terminal (the attached scenario).
INTERACTIVE_DRIVERS: dict[str, Callable[[str, RunDirs], Invocation]] = {
    "claude-code": claude_code_interactive,
}
