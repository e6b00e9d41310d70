"""The agent CLIs the lab knows how to run, with the versions it pins.

Pins are the versions checked by hand (see docs/clients.md); ``--version NAME=X``
runs another one. Every package comes from the npm registry and is installed into
its own prefix under the cache, so versions never mix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClientSpec:
    """One agent CLI: where it comes from and how it introduces itself to MCP servers."""

    name: str
    title: str
    package: str | None
    version: str
    binary: str
    client_info: str  # the clientInfo name it sends in initialize
    needs_node22: bool = False
    uses_model: bool = True
    not_installable: str | None = None  # why the lab cannot install it offline
    # An install script (under node_modules) that only works locally and that the CLI
    # needs; every other install script stays off.
    local_postinstall: str | None = None


CLIENTS: dict[str, ClientSpec] = {
    spec.name: spec
    for spec in (
        ClientSpec(
            name="inspector",
            title="MCP Inspector CLI (mcpdo)",
            package="@modelcontextprotocol/inspector",
            version="2.12.0",
            binary="mcpdo",
            client_info="inspector-cli",
            needs_node22=True,
            uses_model=False,
        ),
        ClientSpec(
            name="claude-code",
            title="Claude Code",
            package="@anthropic-ai/claude-code",
            version="2.1.197",
            binary="claude",
            client_info="claude-code",
            # links the platform's binary (an optional dependency) over bin/claude.exe
            local_postinstall="@anthropic-ai/claude-code/install.cjs",
        ),
        ClientSpec(
            name="gemini-cli",
            title="Gemini CLI",
            package="@google/gemini-cli",
            version="0.61.0",
            binary="gemini",
            client_info="gemini-cli-mcp-client",
        ),
        ClientSpec(
            name="codex",
            title="Codex CLI",
            package="@openai/codex",
            version="0.171.0",
            binary="codex",
            client_info="codex-mcp-client",
        ),
        ClientSpec(
            name="opencode",
            title="OpenCode",
            package="opencode-ai",
            version="1.18.33",
            binary="opencode",
            client_info="opencode",
            # links the platform's binary (an optional dependency) over bin/opencode.exe
            local_postinstall="opencode-ai/postinstall.mjs",
        ),
        ClientSpec(
            name="copilot",
            title="GitHub Copilot CLI",
            package="@github/copilot",
            version="1.0.102",
            binary="copilot",
            client_info="copilot-cli",
            needs_node22=True,
        ),
        ClientSpec(
            name="goose",
            title="Goose",
            package=None,
            version="-",
            binary="goose",
            client_info="goose",
            not_installable="not installable offline: no CLI on PyPI, npm or Debian",
        ),
        ClientSpec(
            name="crush",
            title="Crush",
            package="@charmland/crush",
            version="-",
            binary="crush",
            client_info="crush",
            not_installable="not installable offline: its npm package downloads the binary "
            "from GitHub when installed",
        ),
    )
}


def known() -> str:
    return ", ".join(CLIENTS)
