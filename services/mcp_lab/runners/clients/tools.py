"""Which of the tools a CLI offers its model the scripted model calls, and with what.

Three kinds, each found by name among the offered tools, whatever the CLI or version:

- the **read tool**: the CLI's own "read an MCP resource" tool (``ReadMcpResourceTool``,
  ``read_mcp_resource``, ...); when the CLI offers none, the lab's own tool
  ``get_review_status`` under whatever prefix the CLI gives it;
- a **tool search**: some CLIs offer tools *deferred*, by name only, behind a search
  tool (Claude Code's ``ToolSearch``, ``{"query": "select:A,B"}``); the model selects
  the read tool (and a neutral one) through it first. Where the search only shows the
  tools' schemas and never declares them (Qwen Code), the model calls them through the
  CLI's **tool bridge** (``tool_call``, ``{"name": ..., "arguments": {...}}``);
- a **neutral tool**: one that reads nothing of the lab (a task list, a plan, a todo
  list), for the steps the model takes after the update without asking for the
  resource again.

Arguments are filled from each tool's JSON schema (:func:`fill_schema`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

# Names under which the CLIs offer "read an MCP resource" to their model.
READ_TOOL_NAMES = ("ReadMcpResourceTool", "read_mcp_resource")
# The lab's own tool (``MCP_TEST_ENABLE_TOOL``); each CLI prefixes it with the server's name.
SERVER_TOOL = "get_review_status"
VIA_RESOURCE_TOOL, VIA_SERVER_TOOL = "resource tool", "server tool"
_TOOL_SEARCH = re.compile(r"^tool_?search$", re.IGNORECASE)
_TOOL_BRIDGE = re.compile(r"^tool_?call$", re.IGNORECASE)
# A deferred tool's declaration in a search result: <function>{"name": ...}</function>.
_DECLARATION = re.compile(r"<function>(.*?)</function>", re.DOTALL)
_SCHEMA_KEYS = ("parametersJsonSchema", "parameters", "input_schema", "inputSchema")
# The lab's tool under a prefix (mcp__lab__, lab___), as a list of deferred tools names it.
_DEFERRED_SERVER_TOOL = re.compile(rf"\b([\w-]+?[_-]{SERVER_TOOL})\b")
# Tools that change nothing and read nothing of the lab, best first (seen offered:
# Claude Code TaskList and TodoWrite, Gemini CLI write_todos, OpenCode todowrite,
# Codex get_goal, Copilot list_bash, Continue Checklist).
NEUTRAL_TOOL_NAMES = (
    "TaskList",
    "TodoWrite",
    "write_todos",
    "todowrite",
    "todo_write",
    "update_plan",
    "get_goal",
    "list_bash",
    "Checklist",
)
# What a neutral tool's arguments are filled with, by property name.
_NEUTRAL_VALUES: dict[str, Any] = {
    "content": "wait for the review",
    "description": "wait for the review",
    "subject": "wait for the review",
    "activeform": "waiting for the review",
    "step": "wait for the review",
    "status": "pending",
    "priority": "low",
    "checklist": "- [ ] wait for the review",  # Continue's: the whole list, as markdown
}


def fill_schema(schema: dict[str, Any], values: dict[str, Any] | None = None) -> Any:
    """A value that satisfies a (simple) JSON schema. Object properties whose name
    contains a key of ``values`` take that value (``server`` matches ``server_name``);
    a required array of objects gets one item."""
    values = values or {}
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        out: dict[str, Any] = {}
        properties: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        for name, sub in properties.items():
            hit = next((v for k, v in values.items() if k in name.lower()), None)
            sub = sub if isinstance(sub, dict) else {}
            if hit is not None and not sub.get("enum"):
                out[name] = hit
            elif name in required:
                out[name] = fill_schema(sub, values)
        return out
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, dict) and (items.get("type") == "object" or "properties" in items):
            return [fill_schema(items, values)]
        return []
    defaults: dict[str, Any] = {"integer": 0, "number": 0, "boolean": False}
    return defaults.get(str(kind), "")


def pick_read_tool(names: Iterable[str]) -> str | None:
    """The offered tool that reads an MCP resource, if any."""
    names = list(names)
    for wanted in READ_TOOL_NAMES:
        if wanted in names:
            return wanted
    for name in names:
        lowered = name.lower()
        if "read" in lowered and "resource" in lowered and "template" not in lowered:
            if "dir" not in lowered:
                return name
    return None


def pick_server_tool(names: Iterable[str]) -> str | None:
    """The offered tool that is the lab's ``get_review_status``, whatever its prefix
    (``mcp__lab__``, ``mcp_lab_``, ``lab_``, ``lab-``)."""
    return next((name for name in names if name.endswith(SERVER_TOOL)), None)


def pick_tool(names: Iterable[str]) -> tuple[str, str] | None:
    """The tool the model reads with, and which kind it is: the CLI's resource-read
    tool when offered, else the server's tool."""
    names = list(names)
    tool = pick_read_tool(names)
    if tool is not None:
        return tool, VIA_RESOURCE_TOOL
    tool = pick_server_tool(names)
    return (tool, VIA_SERVER_TOOL) if tool is not None else None


def pick_template_list(names: Iterable[str]) -> str | None:
    """The offered tool that lists MCP resource templates, if any."""
    found = (n for n in names if all(w in n.lower() for w in ("list", "resource", "template")))
    return next(found, None)


_WAIT_FOR_SERVERS = re.compile(r"^wait.*mcp", re.IGNORECASE)


def pick_wait_for_servers(names: Iterable[str]) -> str | None:
    """The offered tool that waits for the CLI's MCP servers to connect (Claude Code's
    ``WaitForMcpServers``, offered instead of the MCP tools when the model is asked
    before its servers are up), if any."""
    return next((name for name in names if _WAIT_FOR_SERVERS.match(name)), None)


def pick_tool_search(names: Iterable[str]) -> str | None:
    """The offered tool that loads deferred tools (``ToolSearch``), if any."""
    return next((name for name in names if _TOOL_SEARCH.match(name)), None)


def pick_tool_bridge(names: Iterable[str]) -> str | None:
    """The offered tool that calls a deferred tool by name (Qwen Code's ``tool_call``)."""
    return next((name for name in names if _TOOL_BRIDGE.match(name)), None)


def bridge_arguments(schema: dict[str, Any], tool: str, arguments: Any) -> Any:
    """The bridge's arguments that call ``tool`` with ``arguments``."""
    return fill_schema(schema, {"name": tool, "arguments": arguments})


def searched_schemas(text: str) -> dict[str, dict[str, Any]]:
    """The tools a search result declares as text, by name: their parameter schemas."""
    found: dict[str, dict[str, Any]] = {}
    for block in _DECLARATION.findall(text):
        try:
            declaration = json.loads(block)
        except ValueError:
            continue
        if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
            continue
        schema: Any = next((declaration[k] for k in _SCHEMA_KEYS if k in declaration), {})
        found[declaration["name"]] = schema if isinstance(schema, dict) else {}
    return found


def pick_neutral_tool(names: Iterable[str]) -> str | None:
    """An offered tool that reads nothing of the lab, if any (never a resource tool,
    never one of the lab's server tools)."""
    names = list(names)
    return next((wanted for wanted in NEUTRAL_TOOL_NAMES if wanted in names), None)


def neutral_arguments(schema: dict[str, Any]) -> Any:
    """Arguments for a neutral tool: one harmless item where the schema asks for a list."""
    return fill_schema(schema, _NEUTRAL_VALUES)


def deferred_names(texts: Iterable[str]) -> tuple[str | None, str | None]:
    """The read tool (else the lab's tool, prefixed) and a neutral tool that the
    request's texts name (deferred tools are listed by name only, e.g. in a system
    reminder), if any."""
    joined = "\n".join(texts)
    read = next((n for n in READ_TOOL_NAMES if re.search(rf"\b{re.escape(n)}\b", joined)), None)
    if read is None:
        server = _DEFERRED_SERVER_TOOL.search(joined)
        read = server.group(1) if server else None
    neutral = next(
        (n for n in NEUTRAL_TOOL_NAMES if re.search(rf"(?m)^\s*{re.escape(n)}\s*$", joined)),
        None,
    )
    return read, neutral


def search_query(read: str | None, neutral: str | None) -> str:
    """The tool-search query that loads ``read`` (and ``neutral``), or a keyword query
    when the request names no read tool."""
    if read is None:
        return "read mcp resource"
    return "select:" + ",".join(n for n in (read, neutral) if n)
