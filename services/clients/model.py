"""A scripted model endpoint on loopback, for running real agent CLIs offline.

It speaks four wire APIs, streamed as the CLIs expect them (tool calls included):
Anthropic Messages (``POST /v1/messages``), OpenAI Responses (``POST /v1/responses``),
OpenAI Chat Completions (``POST /v1/chat/completions``) and Gemini
(``POST /v1beta/models/M:streamGenerateContent`` and ``:generateContent``).

Whatever the API, the model follows one script (see :meth:`ScriptedModel.decide`):

1. it calls the CLI's resource-read tool (found by name among the offered tools,
   its arguments filled from the tool's JSON schema: server name and URI);
2. when the first tool result comes back it awaits the ``on_first_result`` hook
   (the runner publishes the lab's update there), then calls the tool again;
3. after the second result it answers in plain text.

A request that offers no tools (titles, next-speaker checks) gets a plain answer,
or an object filled from the requested JSON schema. Every tool result that reaches
the model is recorded in :class:`ModelRecord`: that is the lab's level 7.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

logger = logging.getLogger("mcp_lab.model")

# Names under which the CLIs offer "read an MCP resource" to their model.
READ_TOOL_NAMES = ("ReadMcpResourceTool", "read_mcp_resource")
_VERSION = re.compile(r"version: (\d+)")
_CHUNKS = 3  # a tool call's arguments are streamed in this many pieces


@dataclass
class ModelRecord:
    """What the scripted model saw during one run."""

    api: str | None = None
    requests: int = 0
    tools_offered: list[str] = field(default_factory=list)
    read_tool: str | None = None
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


@dataclass
class Turn:
    """One model request, reduced to what the script needs."""

    tools: dict[str, dict[str, Any]]  # name -> JSON schema of the arguments
    results: list[str]  # text of every tool result in the conversation, in order
    json_schema: dict[str, Any] | None = None  # a structured answer was asked for


@dataclass
class Reply:
    """What the model answers: a text, or one call of ``tool`` with ``arguments``."""

    text: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


def flatten_text(value: Any) -> str:
    """Every string inside a tool result (str, list of blocks, nested dicts), joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(t for t in (flatten_text(v) for v in value) if t)
    if isinstance(value, dict):
        return "\n".join(t for t in (flatten_text(v) for v in value.values()) if t)
    return ""


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


UpdateHook = Callable[[], Awaitable[None]]


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
        self._update: asyncio.Task[None] | None = None
        self.first_result = asyncio.Event()
        self.answered = asyncio.Event()

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
        tool = pick_read_tool(names)
        record.read_tool = record.read_tool or tool
        if len(turn.results) > len(record.tool_results):
            record.tool_results = list(turn.results)
        if tool is None:
            return self._answer(f"No resource-read tool was offered (tools: {', '.join(names)}).")
        arguments = fill_schema(turn.tools[tool], {"server": self.server_name, "uri": self.uri})
        if not turn.results:
            record.tool_calls += 1
            return Reply(tool=tool, arguments=arguments)
        if len(turn.results) == 1:
            self.first_result.set()
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
        self.answered.set()
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


# ---------------------------------------------------------------- the wire APIs

_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def _pieces(text: str, count: int = _CHUNKS) -> list[str]:
    """``text`` cut into ``count`` non-empty pieces (fewer if it is short)."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(events: list[tuple[str | None, Any]]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for name, data in events:
            payload = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            yield f"{head}data: {payload}\n\n".encode()

    return StreamingResponse(body(), media_type="text/event-stream")


# Anthropic Messages


def anthropic_turn(body: dict[str, Any]) -> Turn:
    tools = {
        t["name"]: t.get("input_schema", {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and "name" in t
    }
    results = [
        flatten_text(block.get("content"))
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    return Turn(tools=tools, results=results)


def anthropic_message(reply: Reply, model: str) -> dict[str, Any]:
    if reply.tool:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": _new_id("toolu"),
            "name": reply.tool,
            "input": reply.arguments,
        }
        stop = "tool_use"
    else:
        block, stop = {"type": "text", "text": reply.text or ""}, "end_turn"
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def anthropic_events(reply: Reply, model: str) -> list[tuple[str | None, Any]]:
    message = anthropic_message(reply, model)
    block = message["content"][0]
    start = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    if block["type"] == "tool_use":
        opening = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in _pieces(json.dumps(block["input"]))
        ]
    else:
        opening = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
    events.append(
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opening},
        )
    )
    for delta in deltas:
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


# OpenAI Responses


def responses_turn(body: dict[str, Any]) -> Turn:
    tools = {
        t["name"]: t.get("parameters") or {}
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function" and "name" in t
    }
    items = body.get("input")
    results = [
        flatten_text(item.get("output"))
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return Turn(tools=tools, results=results)


def responses_events(reply: Reply, model: str) -> list[tuple[str | None, Any]]:
    response_id = _new_id("resp")
    base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": model}
    seq = itertools.count()
    events: list[tuple[str | None, Any]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

    emit("response.created", response={**base, "status": "in_progress", "output": []})
    item_id = _new_id("item")
    if reply.tool:
        arguments = json.dumps(reply.arguments)
        item = {
            "type": "function_call",
            "id": item_id,
            "call_id": _new_id("call"),
            "name": reply.tool,
            "arguments": "",
            "status": "in_progress",
        }
        emit("response.output_item.added", output_index=0, item=item)
        for piece in _pieces(arguments):
            emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=0,
                delta=piece,
            )
        emit(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=0,
            arguments=arguments,
        )
        done = {**item, "arguments": arguments, "status": "completed"}
    else:
        text = reply.text or ""
        item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        emit("response.output_item.added", output_index=0, item=item)
        emit("response.content_part.added", part=part, **where)
        for piece in _pieces(text):
            emit("response.output_text.delta", delta=piece, **where)
        emit("response.output_text.done", text=text, **where)
        emit("response.content_part.done", part={**part, "text": text}, **where)
        done = {**item, "status": "completed", "content": [{**part, "text": text}]}
    emit("response.output_item.done", output_index=0, item=done)
    usage = {
        "input_tokens": 1,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 1,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2,
    }
    emit(
        "response.completed",
        response={**base, "status": "completed", "output": [done], "usage": usage},
    )
    return events


# OpenAI Chat Completions


def chat_turn(body: dict[str, Any]) -> Turn:
    tools: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and "name" in function:
            tools[function["name"]] = function.get("parameters") or {}
    results = [
        flatten_text(message.get("content"))
        for message in body.get("messages", [])
        if isinstance(message, dict) and message.get("role") == "tool"
    ]
    schema = None
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
    return Turn(tools=tools, results=results, json_schema=schema)


def chat_completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    finish = "stop"
    if reply.tool:
        message["tool_calls"] = [
            {
                "id": _new_id("call"),
                "type": "function",
                "function": {"name": reply.tool, "arguments": json.dumps(reply.arguments)},
            }
        ]
        finish = "tool_calls"
    return {
        "id": _new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chat_events(reply: Reply, model: str) -> list[tuple[str | None, Any]]:
    full = chat_completion(reply, model)
    base = {k: full[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str | None, Any]:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    message = full["choices"][0]["message"]
    events = [chunk({"role": "assistant", "content": None if reply.tool else ""})]
    if reply.tool:
        call = message["tool_calls"][0]
        pieces = _pieces(call["function"]["arguments"])
        head = {"index": 0, "id": call["id"], "type": "function"}
        events.append(
            chunk({"tool_calls": [{**head, "function": {"name": reply.tool, "arguments": ""}}]})
        )
        for piece in pieces:
            events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    else:
        events += [chunk({"content": piece}) for piece in _pieces(reply.text or "")]
    last = chunk({}, full["choices"][0]["finish_reason"])
    last[1]["usage"] = full["usage"]
    return [*events, last, (None, "[DONE]")]


# Gemini


def gemini_turn(body: dict[str, Any]) -> Turn:
    tools: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        for declaration in (tool or {}).get("functionDeclarations") or []:
            schema = declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
            tools[declaration["name"]] = _lower_types(schema)
    results = [
        flatten_text(part["functionResponse"].get("response"))
        for content in body.get("contents", [])
        for part in (content or {}).get("parts") or []
        if isinstance(part, dict) and "functionResponse" in part
    ]
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is None and config.get("responseMimeType") == "application/json":
        schema = {}
    return Turn(
        tools=tools, results=results, json_schema=_lower_types(schema) if schema else schema
    )


def _lower_types(schema: Any) -> Any:
    """Gemini's OpenAPI-style schemas spell types in capitals (``OBJECT``)."""
    if isinstance(schema, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def gemini_response(reply: Reply, model: str) -> dict[str, Any]:
    part: dict[str, Any] = (
        {"functionCall": {"name": reply.tool, "args": reply.arguments}}
        if reply.tool
        else {"text": reply.text or ""}
    )
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
        "modelVersion": model,
    }


def gemini_events(reply: Reply, model: str) -> list[tuple[str | None, Any]]:
    if reply.tool:
        return [(None, gemini_response(reply, model))]
    pieces = _pieces(reply.text or "")
    events: list[tuple[str | None, Any]] = []
    for i, piece in enumerate(pieces):
        chunk = gemini_response(Reply(text=piece), model)
        if i < len(pieces) - 1:
            del chunk["candidates"][0]["finishReason"]
        events.append((None, chunk))
    return events


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
            return _sse(anthropic_events(reply, name))
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
            return _sse(events)
        return JSONResponse(events[-1][1]["response"])

    async def chat(request: Request) -> Response:
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        reply = await model.decide("openai-chat", chat_turn(body))
        name = str(body.get("model", "scripted"))
        if body.get("stream"):
            return _sse(chat_events(reply, name))
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
            return _sse(gemini_events(reply, name))
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
