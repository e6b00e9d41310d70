"""The four wire APIs of the scripted model: each request reduced to a :class:`Turn`,
each :class:`Reply` rendered as that API's response, streamed the way the CLIs expect
(tool-call arguments arrive in several deltas where the API streams them).

Anthropic Messages, OpenAI Responses, OpenAI Chat Completions, Gemini.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import StreamingResponse

from mcp_lab.sse import frame

_CHUNKS = 3  # a tool call's arguments (and a text) are streamed in this many pieces


@dataclass
class Turn:
    """One model request, reduced to what the script needs."""

    tools: dict[str, dict[str, Any]]  # name -> JSON schema of the arguments
    results: list[str]  # text of every tool result in the conversation, in order
    json_schema: dict[str, Any] | None = None  # a structured answer was asked for
    # Every text of the request but its tool definitions (system prompt, messages,
    # tool results), one string per JSON string: where a CLI would put an update.
    texts: list[str] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)  # the request as sent


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


# Keys whose values are tool definitions, not conversation.
_TOOL_KEYS = frozenset({"tools", "tool_choice", "functionDeclarations", "toolConfig"})


def leaf_texts(value: Any) -> list[str]:
    """Every string in a request body, outside its tool definitions."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for v in value for t in leaf_texts(v)]
    if isinstance(value, dict):
        return [t for k, v in value.items() if k not in _TOOL_KEYS for t in leaf_texts(v)]
    return []


_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def _pieces(text: str, count: int = _CHUNKS) -> list[str]:
    """``text`` cut into ``count`` non-empty pieces (fewer if it is short)."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse(events: list[tuple[str | None, Any]]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for name, data in events:
            payload = data if isinstance(data, str) else json.dumps(data)
            yield frame(payload, event=name)

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
    return Turn(tools=tools, results=results, texts=leaf_texts(body), body=body)


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
    return Turn(tools=tools, results=results, texts=leaf_texts(body), body=body)


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
        # Both branches build a JSON object with mixed value types.
        item: dict[str, Any] = {
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
        done: dict[str, Any] = {**item, "arguments": arguments, "status": "completed"}
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
    return Turn(tools=tools, results=results, json_schema=schema, texts=leaf_texts(body), body=body)


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
        tools=tools,
        results=results,
        json_schema=_lower_types(schema) if schema else schema,
        texts=leaf_texts(body),
        body=body,
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
