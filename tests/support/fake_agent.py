"""A small agent CLI of our own, for testing the clients runner's verdicts.

It behaves like the real CLIs where it matters: an MCP client of the lab (the SDK,
Streamable HTTP) and a client of a model endpoint (OpenAI Chat Completions, the
scripted model), offering its model the tools ``read_mcp_resource``,
``list_mcp_resources`` and ``todowrite``, and keeping its conversation in HOME so that
``--continue`` resumes it. What it does with an update is chosen by ``--behaviour``:

- ``push``: subscribes after its first read; on ``notifications/resources/updated`` it
  reads the resource again by itself and puts the new text into its next model request
  (a user message), unasked: what a client that reflects updates does (level 7, push);
- ``notice``: subscribes; on the notification it tells its model only that the
  resource changed, without reading it (level 7 by notice, lab level 5);
- ``pull-only``: never subscribes; reads only when its model calls the read tool;
- ``eager``: reads and subscribes as soon as it connects, waits (3 s at most) for the
  first update before it asks its model anything, and does nothing on the
  notification (lab level 5: the model's one read must not pass for its re-read);
- ``late-push``: like ``push``, but subscribes one model step after its first read (after
  the lab's update): the lab must still update it after its subscribe;
- ``offline``: never connects to the lab at all (as a CLI that ignored the MCP
  configuration it was given): the runner's failure, not a level.

    python tests/support/fake_agent.py --mcp URL --model URL --behaviour push [--continue]
    (--mcp "": over stdio, starting the server of MCP_LAB_SERVER_COMMAND)
        [--agent-version V] PROMPT
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

NAME = "fake-agent"
URI = "test://review/status"
VERSION = "0.1.0"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_mcp_resource",
            "description": "Read a resource of an MCP server.",
            "parameters": {
                "type": "object",
                "properties": {"server": {"type": "string"}, "uri": {"type": "string"}},
                "required": ["server", "uri"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_mcp_resources",
            "description": "List the resources of MCP servers.",
            "parameters": {"type": "object", "properties": {"server": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "todowrite",
            "description": "Write the todo list.",
            "parameters": {
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": {"type": "string"},
                                "status": {"type": "string", "enum": ["pending", "done"]},
                            },
                            "required": ["content", "status"],
                        },
                    }
                },
                "required": ["todos"],
            },
        },
    },
]
_STEPS = 30  # model requests at most, per turn
_EAGER_WAIT = 3.0


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.session_file = Path(os.environ["HOME"]) / ".fake-agent" / "session.json"
        self.updates: asyncio.Queue[str] = asyncio.Queue()
        self.subscribed = False
        self.read_at: int | None = None  # the step of its first read
        self.step = 0

    async def on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            await self.updates.put(str(message.params.uri))

    def _load(self) -> list[dict[str, Any]]:
        if self.args.resume and self.session_file.exists():
            return list(json.loads(self.session_file.read_text()))
        return []

    def _save(self, messages: list[dict[str, Any]]) -> None:
        self.session_file.parent.mkdir(parents=True, exist_ok=True)
        self.session_file.write_text(json.dumps(messages))

    async def run(self) -> None:
        info = mcp_types.Implementation(name=NAME, version=self.args.agent_version)
        async with httpx2.AsyncClient(timeout=30) as http:
            if self.args.behaviour == "offline":
                await self._converse(http, None)
                return
            command = os.environ.get("MCP_LAB_SERVER_COMMAND", "")
            if not self.args.mcp and command:  # over stdio: it starts the lab's server
                parts = shlex.split(command)
                server = StdioServerParameters(command=parts[0], args=parts[1:])
                transport: Any = stdio_client(server)
            else:
                transport = streamable_http_client(self.args.mcp, http_client=http)
            async with Client(
                transport, mode="legacy", client_info=info, message_handler=self.on_message
            ) as client:
                if self.args.behaviour == "eager" and not self.args.resume:
                    await self._read(client, URI)
                    await client.subscribe_resource(URI)
                    # A slow start: its model is asked only once the first update came
                    # (or after a bound), so the model's read may follow a notification.
                    with contextlib.suppress(TimeoutError):
                        uri = await asyncio.wait_for(self.updates.get(), _EAGER_WAIT)
                        self.updates.put_nowait(uri)
                await self._converse(http, client)

    async def _converse(self, http: httpx2.AsyncClient, client: Client | None) -> None:
        """The turn: model requests and tool calls until the model answers in text."""
        messages = [*self._load(), {"role": "user", "content": self.args.prompt}]
        for step in range(_STEPS):
            late = self.read_at is not None and step >= self.read_at + 2
            if self.args.behaviour == "late-push" and late and not self.subscribed:
                assert client is not None
                # Two model steps after its read: after the lab's update.
                await client.subscribe_resource(URI)
                self.subscribed = True
            self.step = step
            if client is not None:
                messages += await self._unasked(client)
            reply = await self._ask(http, messages)
            calls = reply.get("tool_calls") or []
            messages.append(
                {"role": "assistant", "content": reply.get("content"), "tool_calls": calls}
                if calls
                else {"role": "assistant", "content": reply.get("content") or ""}
            )
            if not calls:
                print(reply.get("content") or "")
                break
            for call in calls:
                result = await self._call(client, call["function"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        self._save(messages)

    async def _ask(self, http: httpx2.AsyncClient, messages: list[dict[str, Any]]) -> Any:
        body = {"model": "scripted", "messages": messages, "tools": TOOLS, "stream": False}
        answer = await http.post(f"{self.args.model}/v1/chat/completions", json=body)
        answer.raise_for_status()
        return answer.json()["choices"][0]["message"]

    async def _call(self, client: Client | None, function: dict[str, Any]) -> str:
        arguments = json.loads(function.get("arguments") or "{}")
        name = function["name"]
        if client is None and name != "todowrite":
            return "No MCP server is configured."
        assert client is not None or name == "todowrite"
        if name == "read_mcp_resource":
            assert client is not None
            uri = arguments["uri"]
            text = await self._read(client, uri)
            self.read_at = self.step if self.read_at is None else self.read_at
            if self.args.behaviour in ("push", "notice") and not self.subscribed:
                await client.subscribe_resource(uri)
                self.subscribed = True
            return text
        if name == "list_mcp_resources":
            assert client is not None
            listed = await client.list_resources()
            return "\n".join(str(r.uri) for r in listed.resources)
        return "Todos written."

    async def _read(self, client: Client, uri: str) -> str:
        result = await client.read_resource(uri)
        return "\n".join(getattr(c, "text", "") for c in result.contents)

    async def _unasked(self, client: Client) -> list[dict[str, Any]]:
        """What the agent puts into its model's context by itself: the updates."""
        added = []
        while not self.updates.empty():
            uri = self.updates.get_nowait()
            if self.args.behaviour in ("push", "late-push"):
                text = await self._read(client, uri)
                added.append({"role": "user", "content": f"[{uri} changed]\n{text}"})
            elif self.args.behaviour == "notice":
                added.append({"role": "user", "content": f"Note: {uri} was updated."})
        return added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mcp", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument(
        "--behaviour",
        choices=["push", "notice", "pull-only", "eager", "late-push", "offline"],
        required=True,
    )
    parser.add_argument("--continue", dest="resume", action="store_true")
    parser.add_argument("--agent-version", default=VERSION, help="the clientInfo version it sends")
    parser.add_argument("prompt")
    asyncio.run(Agent(parser.parse_args()).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
