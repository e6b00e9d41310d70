"""A scripted model endpoint on loopback, for running real agent CLIs offline.

It speaks four wire APIs (:mod:`services.clients.apis`), streamed as the CLIs expect
them (tool calls included):
Anthropic Messages (``POST /v1/messages``), OpenAI Responses (``POST /v1/responses``),
OpenAI Chat Completions (``POST /v1/chat/completions``) and Gemini
(``POST /v1beta/models/M:streamGenerateContent`` and ``:generateContent``).

Whatever the API, the model follows one script (see :meth:`ScriptedModel.decide`):

1. it calls the CLI's resource-read tool (found by name among the offered tools,
   its arguments filled from the tool's JSON schema: server name and URI); when the
   CLI offers none, it calls the server's own tool (``get_review_status``, under
   whatever prefix the CLI gives it), if the server offers one;
2. when the first tool result comes back it awaits the ``on_first_result`` hook
   (the runner publishes the lab's update there), then calls the tool again;
3. after the second result it answers in plain text.

A request that offers no tools (titles, next-speaker checks) gets a plain answer,
or an object filled from the requested JSON schema. Every tool result that reaches
the model is recorded in :class:`ModelRecord`: that is the lab's level 7.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.clients.apis import (
    Reply,
    Turn,
    anthropic_events,
    anthropic_message,
    anthropic_turn,
    chat_completion,
    chat_events,
    chat_turn,
    gemini_events,
    gemini_response,
    gemini_turn,
    responses_events,
    responses_turn,
    sse,
)

logger = logging.getLogger("mcp_lab.model")

# Names under which the CLIs offer "read an MCP resource" to their model.
READ_TOOL_NAMES = ("ReadMcpResourceTool", "read_mcp_resource")
# The lab's own tool (``MCP_TEST_ENABLE_TOOL``); each CLI prefixes it with the server's name.
SERVER_TOOL = "get_review_status"
VIA_RESOURCE_TOOL, VIA_SERVER_TOOL = "resource tool", "server tool"
_VERSION = re.compile(r"version: (\d+)")


@dataclass
class ModelRecord:
    """What the scripted model saw during one run."""

    api: str | None = None
    requests: int = 0
    tools_offered: list[str] = field(default_factory=list)
    read_tool: str | None = None  # the tool the model read the resource with
    read_via: str | None = None  # VIA_RESOURCE_TOOL (the CLI's) or VIA_SERVER_TOOL (the lab's)
    tool_calls: int = 0
    tool_results: list[str] = field(default_factory=list)
    answer: str | None = None
    update_error: str | None = None

    @property
    def versions_seen(self) -> list[int]:
        """The resource versions that appear in the tool results, in order."""
        return [int(m) for text in self.tool_results for m in _VERSION.findall(text)]

    @property
    def saw_v1(self) -> bool:
        return 1 in self.versions_seen

    @property
    def saw_v2(self) -> bool:
        return any(v >= 2 for v in self.versions_seen)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(versions_seen=self.versions_seen, saw_v1=self.saw_v1, saw_v2=self.saw_v2)
        return data


def fill_schema(schema: dict[str, Any], values: dict[str, Any] | None = None) -> Any:
    """A value that satisfies a (simple) JSON schema. Object properties whose name
    contains a key of ``values`` take that value (``server`` matches ``server_name``)."""
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
            if hit is not None:
                out[name] = hit
            elif name in required:
                out[name] = fill_schema(sub if isinstance(sub, dict) else {}, values)
        return out
    defaults: dict[str, Any] = {"integer": 0, "number": 0, "boolean": False, "array": []}
    return defaults.get(str(kind), "")


def pick_read_tool(names: list[str]) -> str | None:
    """The offered tool that reads an MCP resource, if any."""
    for wanted in READ_TOOL_NAMES:
        if wanted in names:
            return wanted
    for name in names:
        lowered = name.lower()
        if "read" in lowered and "resource" in lowered and "template" not in lowered:
            return name
    return None


def pick_server_tool(names: list[str]) -> str | None:
    """The offered tool that is the lab's ``get_review_status``, whatever its prefix
    (``mcp__lab__``, ``mcp_lab_``, ``lab_``, ``lab-``)."""
    return next((name for name in names if name.endswith(SERVER_TOOL)), None)


def pick_tool(names: list[str]) -> tuple[str, str] | None:
    """The tool the model reads with, and which kind it is: the CLI's resource-read
    tool when offered, else the server's tool."""
    tool = pick_read_tool(names)
    if tool is not None:
        return tool, VIA_RESOURCE_TOOL
    tool = pick_server_tool(names)
    return (tool, VIA_SERVER_TOOL) if tool is not None else None


# Called with no arguments; what it returns (the runner's publish_update returns the
# updater's log line) is not used.
UpdateHook = Callable[[], Awaitable[object]]


class ScriptedModel:
    """The script and its record; :func:`build_app` puts the wire APIs around it."""

    def __init__(
        self,
        server_name: str,
        uri: str,
        on_first_result: UpdateHook | None = None,
        update_timeout: float = 30.0,
    ) -> None:
        self.server_name = server_name
        self.uri = uri
        self.record = ModelRecord()
        self._on_first_result = on_first_result
        self._update_timeout = update_timeout
        self._update: asyncio.Task[object] | None = None

    async def decide(self, api: str, turn: Turn) -> Reply:
        """The next reply for ``turn`` (see the module docstring)."""
        record = self.record
        record.requests += 1
        logger.info(
            "[model] %s request %d: %d tool(s), %d tool result(s)",
            api,
            record.requests,
            len(turn.tools),
            len(turn.results),
        )
        if not turn.tools:
            if turn.json_schema is not None:
                return Reply(text=json.dumps(fill_schema(turn.json_schema)))
            return Reply(text="ok")
        record.api = api
        names = list(turn.tools)
        if not record.tools_offered:
            record.tools_offered = names
        picked = pick_tool(names)
        if len(turn.results) > len(record.tool_results):
            record.tool_results = list(turn.results)
        if picked is None:
            return self._answer(
                f"Neither a resource-read tool nor the server's {SERVER_TOOL} was offered "
                f"(tools: {', '.join(names)})."
            )
        tool, kind = picked
        if record.read_tool is None:
            record.read_tool, record.read_via = tool, kind
        arguments = fill_schema(turn.tools[tool], {"server": self.server_name, "uri": self.uri})
        if not turn.results:
            record.tool_calls += 1
            return Reply(tool=tool, arguments=arguments)
        if len(turn.results) == 1:
            await self._await_update()
            record.tool_calls += 1
            return Reply(tool=tool, arguments=arguments)
        return self._answer(
            "First read: "
            + _summary(turn.results[0])
            + "; second read: "
            + _summary(turn.results[-1])
        )

    def _answer(self, text: str) -> Reply:
        self.record.answer = text
        return Reply(text=text)

    async def _await_update(self) -> None:
        """Run the update hook once (a retried request waits for the same run)."""
        if self._on_first_result is None:
            return
        if self._update is None:
            self._update = asyncio.ensure_future(self._on_first_result())
        try:
            await asyncio.wait_for(asyncio.shield(self._update), self._update_timeout)
        except Exception as exc:  # the run goes on; the row says why v2 is missing
            self.record.update_error = self.record.update_error or f"{type(exc).__name__}: {exc}"
            logger.warning("[model] update hook failed: %s", self.record.update_error)


def _summary(text: str) -> str:
    status = re.search(r"status: (\w+)", text)
    version = _VERSION.search(text)
    if status and version:
        return f"status {status.group(1)} (version {version.group(1)})"
    return json.dumps(text[:80])


# The app


def build_app(model: ScriptedModel) -> Starlette:
    """The HTTP endpoint around ``model``; anything unknown is a logged 404."""

    async def body_of(request: Request) -> dict[str, Any] | Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": {"message": "body is not an object"}}, status_code=400)
        return body

    async def messages(request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        reply = await model.decide("anthropic-messages", anthropic_turn(body))
        name = str(body.get("model", "scripted"))
        if body.get("stream"):
            return sse(anthropic_events(reply, name))
        return JSONResponse(anthropic_message(reply, name))

    async def count_tokens(request: Request) -> Response:
        return JSONResponse({"input_tokens": 1})

    async def responses(request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        reply = await model.decide("openai-responses", responses_turn(body))
        events = responses_events(reply, str(body.get("model", "scripted")))
        if body.get("stream", False):
            return sse(events)
        return JSONResponse(events[-1][1]["response"])

    async def chat(request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        reply = await model.decide("openai-chat", chat_turn(body))
        name = str(body.get("model", "scripted"))
        if body.get("stream"):
            return sse(chat_events(reply, name))
        return JSONResponse(chat_completion(reply, name))

    async def gemini(request: Request) -> Response:
        name, _, method = request.path_params["target"].partition(":")
        if method == "countTokens":
            return JSONResponse({"totalTokens": 1})
        if method not in ("generateContent", "streamGenerateContent"):
            return await not_found(request)
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        reply = await model.decide("gemini", gemini_turn(body))
        if method == "streamGenerateContent":
            return sse(gemini_events(reply, name))
        return JSONResponse(gemini_response(reply, name))

    async def models(request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "lab"}]}
        )

    async def root(request: Request) -> Response:
        return Response(status_code=200)  # a reachability check (Claude Code sends HEAD /)

    async def not_found(request: Request) -> Response:
        logger.warning("[model] no such endpoint: %s %s", request.method, request.url.path)
        return JSONResponse({"error": {"message": "not found"}}, status_code=404)

    return Starlette(
        routes=[
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1beta/models/{target}", gemini, methods=["POST"]),
            Route("/", root, methods=["GET", "HEAD"]),
            Route("/{rest:path}", not_found, methods=["GET", "POST", "HEAD", "PUT", "DELETE"]),
        ]
    )


@asynccontextmanager
async def serve(model: ScriptedModel) -> AsyncIterator[str]:
    """Serve ``model`` on a free loopback port for the duration; yields its base URL.

    The socket is bound before the server starts, so a client that connects at
    once waits in the backlog instead of being refused.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(model), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, 10)
        except TimeoutError:
            task.cancel()
        sock.close()
