"""The scripted model endpoint, over real HTTP on loopback.

One test per wire API plays the CLI's side of a pull run: a request offering tools
(the model must stream a call of the read tool with arguments from its schema), the
first tool result (the model must await the update hook, then call again), the second
result (the model answers in text), and checks what the model recorded. The scored
script's tests (its neutral steps, what counts as a push or a notice, deferred tools)
follow.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from mcp_lab.catalog import SERVER_INSTRUCTIONS
from mcp_lab.runners.clients.endpoint import serve
from mcp_lab.runners.clients.model import PULL, SCORED, ScriptedModel
from mcp_lab.runners.clients.tools import (
    VIA_RESOURCE_TOOL,
    VIA_SERVER_TOOL,
    deferred_names,
    fill_schema,
    neutral_arguments,
    pick_neutral_tool,
    pick_read_tool,
    pick_tool,
    search_query,
)

URI = "test://review/status"
V1 = "status: pending\nversion: 1\nmessage: x"
V2 = "status: reviewed\nversion: 2\nmessage: x"
READ_SCHEMA = {
    "type": "object",
    "properties": {"server": {"type": "string"}, "uri": {"type": "string"}},
    "required": ["server", "uri"],
}
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sse_events(text: str) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) of every event of an SSE body."""
    events: list[tuple[str | None, Any]] = []
    for block in text.strip().split("\n\n"):
        name = None
        data = []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        payload = "\n".join(data)
        events.append((name, payload if payload == "[DONE]" else json.loads(payload)))
    return events


def as_json(text: str) -> str:
    return json.dumps({"contents": [{"uri": URI, "text": text}]})


class Run:
    """A scripted model served on loopback, with an update hook that counts its calls."""

    def __init__(self, mode: str = PULL, **options: float) -> None:
        self.updates = 0

        async def publish() -> None:
            self.updates += 1

        self.model = ScriptedModel("lab", URI, publish, mode=mode, **options)


async def play(
    post: Callable[[list[str]], Any], call_of: Callable[[Any], tuple[str, dict]]
) -> list[Any]:
    """Three turns: no result, the v1 result, both results. Returns the three replies."""
    first = await post([])
    assert call_of(first) == ("read_mcp_resource", {"server": "lab", "uri": URI})
    second = await post([V1])
    assert call_of(second) == ("read_mcp_resource", {"server": "lab", "uri": URI})
    third = await post([V1, V2])
    return [first, second, third]


def check_record(run: Run, api: str) -> None:
    record = run.model.record
    assert run.updates == 1
    assert record.api == api
    assert record.tools_offered == ["list_mcp_resources", "read_mcp_resource"]
    assert (record.read_tool, record.read_via) == ("read_mcp_resource", VIA_RESOURCE_TOOL)
    assert record.read_calls == 2
    assert record.versions_seen == [1, 2]
    assert record.saw_v1 and record.saw_v2
    assert record.answer is not None and "status reviewed (version 2)" in record.answer


async def test_anthropic_messages_streams_tool_use() -> None:
    run = Run()
    tools = [
        {"name": "list_mcp_resources", "input_schema": {"type": "object", "properties": {}}},
        {"name": "read_mcp_resource", "input_schema": READ_SCHEMA},
    ]
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:

        async def post(results: list[str]) -> list:
            messages: list[dict] = [{"role": "user", "content": "go"}]
            for i, text in enumerate(results):
                messages.append(
                    {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}"}]}
                )
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": f"t{i}",
                                # as Claude Code sends it: the read result as JSON text
                                "content": [{"type": "text", "text": as_json(text)}],
                            }
                        ],
                    }
                )
            body = {"model": "m", "stream": True, "messages": messages, "tools": tools}
            response = await http.post("/v1/messages", json=body)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            return sse_events(response.text)

        def call_of(events: list) -> tuple[str, dict]:
            names = [name for name, _ in events]
            assert names[0] == "message_start" and names[-1] == "message_stop"
            start = next(d for n, d in events if n == "content_block_start")["content_block"]
            deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
            assert len(deltas) > 1  # the arguments really are streamed in pieces
            stop = next(d for n, d in events if n == "message_delta")["delta"]["stop_reason"]
            assert start["type"] == "tool_use" and stop == "tool_use"
            return start["name"], json.loads("".join(d["partial_json"] for d in deltas))

        *_, third = await play(post, call_of)
        deltas = [d["delta"]["text"] for n, d in third if n == "content_block_delta"]
        assert "status reviewed" in "".join(deltas)
        plain = await http.post(
            "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "t"}]}
        )
        assert plain.json()["content"] == [{"type": "text", "text": "ok"}]
    check_record(run, "anthropic-messages")


async def test_openai_responses_streams_function_call() -> None:
    run = Run()
    tools = [
        {"type": "function", "name": "list_mcp_resources", "parameters": {"type": "object"}},
        {"type": "function", "name": "read_mcp_resource", "parameters": READ_SCHEMA},
        {"type": "web_search"},
    ]
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:

        async def post(results: list[str]) -> list:
            items: list[dict] = [{"type": "message", "role": "user", "content": "go"}]
            for i, text in enumerate(results):
                items.append({"type": "function_call", "call_id": f"c{i}", "name": "x"})
                items.append({"type": "function_call_output", "call_id": f"c{i}", "output": text})
            body = {"model": "m", "stream": True, "input": items, "tools": tools}
            response = await http.post("/v1/responses", json=body)
            assert response.status_code == 200
            return sse_events(response.text)

        def call_of(events: list) -> tuple[str, dict]:
            assert [n for n, _ in events] == [d["type"] for _, d in events]
            assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
            added = next(d for n, d in events if n == "response.output_item.added")["item"]
            deltas = [
                d["delta"] for n, d in events if n == "response.function_call_arguments.delta"
            ]
            assert len(deltas) > 1
            done = next(d for n, d in events if n == "response.output_item.done")["item"]
            assert done["arguments"] == "".join(deltas)
            assert events[-1][1]["response"]["output"] == [done]
            return added["name"], json.loads("".join(deltas))

        *_, third = await play(post, call_of)
        assert "status reviewed" in third[-1][1]["response"]["output"][0]["content"][0]["text"]
    check_record(run, "openai-responses")


async def test_openai_chat_completions_streams_tool_calls() -> None:
    run = Run()
    tools = [
        {"type": "function", "function": {"name": "list_mcp_resources", "parameters": {}}},
        {"type": "function", "function": {"name": "read_mcp_resource", "parameters": READ_SCHEMA}},
    ]
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:

        async def post(results: list[str]) -> list:
            messages: list[dict] = [{"role": "user", "content": "go"}]
            for i, text in enumerate(results):
                messages.append({"role": "assistant", "tool_calls": [{"id": f"c{i}"}]})
                messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
            body = {"model": "m", "stream": True, "messages": messages, "tools": tools}
            response = await http.post("/v1/chat/completions", json=body)
            assert response.status_code == 200
            return sse_events(response.text)

        def call_of(events: list) -> tuple[str, dict]:
            assert events[-1] == (None, "[DONE]")
            chunks = [d["choices"][0] for _, d in events[:-1]]
            calls = [c["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["delta"]]
            assert len(calls) > 2  # the name first, then the arguments in pieces
            assert chunks[-1]["finish_reason"] == "tool_calls"
            arguments = "".join(c["function"]["arguments"] for c in calls)
            return calls[0]["function"]["name"], json.loads(arguments)

        *_, third = await play(post, call_of)
        text = "".join(d["choices"][0]["delta"].get("content") or "" for _, d in third[:-1])
        assert "status reviewed" in text
    check_record(run, "openai-chat")


async def test_gemini_stream_generate_content_function_call() -> None:
    run = Run()
    tools = [
        {
            "functionDeclarations": [
                {"name": "list_mcp_resources", "parametersJsonSchema": {"type": "object"}},
                {
                    "name": "read_mcp_resource",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"server": {"type": "STRING"}, "uri": {"type": "STRING"}},
                        "required": ["server", "uri"],
                    },
                },
            ]
        }
    ]
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:

        async def post(results: list[str]) -> list:
            contents: list[dict] = [{"role": "user", "parts": [{"text": "go"}]}]
            for text in results:
                contents.append({"role": "model", "parts": [{"functionCall": {"name": "x"}}]})
                response = {"output": {"content": [{"type": "text", "text": text}]}}
                contents.append(
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "x", "response": response}}],
                    }
                )
            response = await http.post(path, json={"contents": contents, "tools": tools})
            assert response.status_code == 200
            return sse_events(response.text)

        def call_of(events: list) -> tuple[str, dict]:
            assert len(events) == 1
            call = events[0][1]["candidates"][0]["content"]["parts"][0]["functionCall"]
            return call["name"], call["args"]

        *_, third = await play(post, call_of)
        text = "".join(d["candidates"][0]["content"]["parts"][0]["text"] for _, d in third)
        assert "status reviewed" in text
        # A side request asking for JSON (Gemini CLI's next-speaker check) gets JSON.
        schema = {
            "type": "OBJECT",
            "properties": {
                "reasoning": {"type": "STRING"},
                "next_speaker": {"type": "STRING", "enum": ["user", "model"]},
            },
            "required": ["reasoning", "next_speaker"],
        }
        side = await http.post(
            "/v1beta/models/gemini-2.5-flash:generateContent",
            json={
                "contents": [{"role": "user", "parts": [{"text": "who next?"}]}],
                "generationConfig": {
                    "responseMimeType": "application/json",
                    "responseSchema": schema,
                },
            },
        )
        answer = side.json()["candidates"][0]["content"]["parts"][0]["text"]
        assert json.loads(answer) == {"reasoning": "", "next_speaker": "user"}
    check_record(run, "gemini")


async def test_bad_requests_are_clear_errors_and_the_model_keeps_serving() -> None:
    run = Run()
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        bad = await http.post(
            "/v1/messages", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
        assert (await http.post("/v1/chat/completions", json=[1])).status_code == 400
        assert (await http.get("/elsewhere")).status_code == 404
        ok = await http.post("/v1/chat/completions", json={"model": "m", "messages": []})
        assert ok.json()["choices"][0]["message"]["content"] == "ok"
    assert run.model.record.requests == 1


async def test_without_a_read_tool_the_model_reads_through_the_servers_tool() -> None:
    """Copilot offers its model no resource tool: with the lab's tool enabled, the model
    calls that (``lab-get_review_status``, no arguments) twice, around the update."""
    run = Run()
    tools = [
        {"type": "function", "function": {"name": "view", "parameters": READ_SCHEMA}},
        {
            "type": "function",
            "function": {
                "name": "lab-get_review_status",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:

        async def post(results: list[str]) -> dict:
            messages: list[dict] = [{"role": "user", "content": "go"}]
            for i, text in enumerate(results):
                messages.append({"role": "assistant", "tool_calls": [{"id": f"c{i}"}]})
                messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
            body = {"model": "m", "messages": messages, "tools": tools}
            return (await http.post("/v1/chat/completions", json=body)).json()["choices"][0]

        for results in ([], [V1]):
            call = (await post(results))["message"]["tool_calls"][0]["function"]
            assert (call["name"], json.loads(call["arguments"])) == ("lab-get_review_status", {})
        assert "status reviewed (version 2)" in (await post([V1, V2]))["message"]["content"]
    record = run.model.record
    assert run.updates == 1
    assert (record.read_tool, record.read_via) == ("lab-get_review_status", VIA_SERVER_TOOL)
    assert record.read_calls == 2 and record.versions_seen == [1, 2]


async def test_no_read_tool_nor_server_tool_means_a_text_answer_naming_the_tools() -> None:
    run = Run()
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {}}}
        for name in ("bash", "view")
    ]
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": tools}
        reply = (await http.post("/v1/chat/completions", json=body)).json()
    assert "bash, view" in reply["choices"][0]["message"]["content"]
    record = run.model.record
    assert record.read_calls == 0 and not record.saw_v1 and record.read_tool is None
    assert run.updates == 1  # applied all the same: the client could still bring it


def test_pick_tool_prefers_the_clis_resource_tool_and_fill_schema() -> None:
    assert pick_read_tool(["ListMcpResourcesTool", "ReadMcpResourceTool"]) == "ReadMcpResourceTool"
    assert pick_read_tool(["mcp_lab_x", "list_mcp_resource_templates"]) is None
    assert pick_read_tool(["lab_read_resource"]) == "lab_read_resource"
    # The server's tool under each CLI's prefix, used only when no resource tool is offered.
    for name in (
        "mcp__lab__get_review_status",
        "mcp_lab_get_review_status",
        "lab_get_review_status",
        "lab-get_review_status",
    ):
        assert pick_tool(["bash", name]) == (name, VIA_SERVER_TOOL)
        assert pick_tool([name, "read_mcp_resource"]) == ("read_mcp_resource", VIA_RESOURCE_TOOL)
    assert pick_tool(["bash", "get_review_status_history_x"]) is None
    schema = {
        "type": "object",
        "properties": {
            "server_name": {"type": "string"},
            "uri": {"type": "string"},
            "limit": {"type": "integer"},
            "mode": {"type": ["null", "string"], "enum": ["a", "b"]},
        },
        "required": ["server_name", "uri", "mode"],
    }
    assert fill_schema(schema, {"server": "lab", "uri": URI}) == {
        "server_name": "lab",
        "uri": URI,
        "mode": "a",
    }


# The scored script: one read, neutral steps, and what counts as the client's push.

TODO_SCHEMA = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "status": {"type": "string", "enum": ["pending", "completed"]},
                },
                "required": ["content", "status"],
            },
        }
    },
    "required": ["todos"],
}


def chat_tools(names: dict[str, dict]) -> list[dict]:
    return [
        {"type": "function", "function": {"name": n, "parameters": p}} for n, p in names.items()
    ]


class Chat:
    """A CLI's side of a chat conversation with the scripted model: it runs every
    tool call the model makes (with canned results) and can add texts of its own."""

    def __init__(self, http: httpx2.AsyncClient, tools: dict[str, dict]) -> None:
        self.http = http
        self.tools = chat_tools(tools)
        self.messages: list[dict] = [{"role": "user", "content": "go"}]
        self.calls: list[tuple[str, dict]] = []

    async def turn(self, results: dict[str, str]) -> str | None:
        """One request; runs the model's tool call (if any) with ``results[name]``;
        returns the model's text when it answered instead."""
        body = {"model": "m", "messages": self.messages, "tools": self.tools}
        message = (await self.http.post("/v1/chat/completions", json=body)).json()["choices"][0][
            "message"
        ]
        if not message.get("tool_calls"):
            self.messages.append({"role": "assistant", "content": message["content"]})
            return message["content"]
        call = message["tool_calls"][0]
        name, arguments = call["function"]["name"], json.loads(call["function"]["arguments"])
        self.calls.append((name, arguments))
        self.messages.append({"role": "assistant", "tool_calls": [call]})
        self.messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": results.get(name, "ok")}
        )
        return None

    async def until_answer(self, results: dict[str, str], bound: int = 50) -> str:
        for _ in range(bound):
            answer = await self.turn(results)
            if answer is not None:
                return answer
        raise AssertionError("the model never answered")


FAST = {"observe_seconds": 0.3, "step_seconds": 0.05}


async def test_scored_reads_once_then_takes_neutral_steps_and_sees_nothing_unasked() -> None:
    run = Run(SCORED, **FAST)
    tools = {"read_mcp_resource": READ_SCHEMA, "todowrite": TODO_SCHEMA, "bash": {}}
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, tools)
        answer = await chat.until_answer({"read_mcp_resource": V1})
        # A later turn (the CLI's continue flag): one neutral step, then an answer.
        chat.messages.append({"role": "user", "content": "Thanks. Please wrap up."})
        later = await chat.until_answer({})
    names = [name for name, _ in chat.calls]
    assert names[0] == "read_mcp_resource" and names.count("read_mcp_resource") == 1
    assert set(names[1:]) == {"todowrite"} and len(names) >= 3
    assert chat.calls[1][1] == {"todos": [{"content": "wait for the review", "status": "pending"}]}
    assert "status pending (version 1)" in answer and later == "Done."
    record = run.model.record
    assert run.updates == 1 and record.update_applied_ms is not None
    assert record.reflected is None and record.after_update >= 3
    assert record.neutral_tool == "todowrite" and record.neutral_calls == len(names) - 1


async def test_version_2_put_in_the_context_unasked_is_a_push() -> None:
    run = Run(SCORED, **FAST)
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"read_mcp_resource": READ_SCHEMA, "todowrite": TODO_SCHEMA})
        assert await chat.turn({"read_mcp_resource": V1}) is None  # the read
        assert await chat.turn({}) is None  # the result: the update, then a neutral step
        chat.messages.append({"role": "user", "content": "[resource changed]\n" + V2})
        await chat.until_answer({})
    record = run.model.record
    assert record.reflected is not None and record.reflected.kind == "push"
    assert record.reflected.request == 3 and "status: reviewed" in record.reflected.excerpt
    assert record.read_calls == 1 and not record.saw_v2  # the model never asked for it


async def test_a_notice_of_the_change_counts_and_the_labs_own_texts_do_not() -> None:
    async def reflected(extra: list[dict]) -> str | None:
        run = Run(SCORED, **FAST)
        async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
            chat = Chat(http, {"read_mcp_resource": READ_SCHEMA, "todowrite": TODO_SCHEMA})
            await chat.turn({"read_mcp_resource": V1})
            await chat.turn({})
            chat.messages += extra
            await chat.until_answer({})
        found = run.model.record.reflected
        return None if found is None else found.kind

    assert await reflected([{"role": "user", "content": f"Note: {URI} was updated."}]) == "notice"
    # What the lab itself says (its instructions, which some CLIs show their model),
    # a CLI's version banner, and a JSON-escaped version 1: none is the client's.
    quiet = [
        {
            "role": "system",
            "content": f"<system-reminder>\n{SERVER_INSTRUCTIONS}\n</system-reminder>",
        },
        {"role": "user", "content": "Claude Code version: 2.1.332"},
        {"role": "user", "content": json.dumps({"text": V1})},
    ]
    assert await reflected(quiet) is None
    escaped = [{"role": "user", "content": json.dumps({"text": V2})}]
    assert await reflected(escaped) == "push"


async def test_deferred_tools_are_loaded_through_the_tool_search_first() -> None:
    """Claude Code 2.1.332 names its MCP resource tools in a reminder, behind ToolSearch."""
    run = Run(SCORED, **FAST)
    reminder = (
        "<system-reminder>\nThe following deferred tools are now available via ToolSearch:\n"
        "ListMcpResourcesTool\nReadMcpResourceTool\nTaskList\n</system-reminder>"
    )
    search = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"ToolSearch": search, "Read": {}})
        chat.messages.insert(0, {"role": "user", "content": reminder})
        await chat.turn({"ToolSearch": "loaded"})
        assert chat.calls == [("ToolSearch", {"query": "select:ReadMcpResourceTool,TaskList"})]
        chat.tools += chat_tools({"ReadMcpResourceTool": READ_SCHEMA, "TaskList": {}})
        await chat.until_answer({"ReadMcpResourceTool": V1})
    assert chat.calls[1] == ("ReadMcpResourceTool", {"server": "lab", "uri": URI})
    assert {name for name, _ in chat.calls[2:]} == {"TaskList"}
    record = run.model.record
    assert record.searches == ["select:ReadMcpResourceTool,TaskList"]
    assert record.failure is None and record.saw_v1


async def test_deferred_tools_called_through_a_tool_call_bridge() -> None:
    """Qwen Code 0.24.4 lists its deferred tools by name; tool_search returns their
    schemas as text, and only tool_call invokes them (they are never declared)."""
    run = Run(SCORED, **FAST)
    reminder = (
        "<system-reminder>\nDeferred tools, reachable through tool_search and tool_call:\n"
        '- "monitor": "Starts a long-running shell command."\n'
        '- "read_mcp_resource": "Reads a resource from a configured MCP server."\n'
        "</system-reminder>"
    )
    read_schema = {
        "type": "object",
        "properties": {"server_name": {"type": "string"}, "uri": {"type": "string"}},
        "required": ["server_name", "uri"],
    }
    declaration = {"name": "read_mcp_resource", "parametersJsonSchema": read_schema}
    loaded = f"<functions>\n<function>{json.dumps(declaration)}</function>\n</functions>"
    search = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    bridge = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    }
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"tool_search": search, "tool_call": bridge, "get_goal": {}})
        chat.messages.insert(0, {"role": "user", "content": reminder})
        await chat.turn({"tool_search": loaded})
        assert chat.calls == [("tool_search", {"query": "select:read_mcp_resource"})]
        await chat.until_answer({"tool_call": V1})
    read_call = {"name": "read_mcp_resource", "arguments": {"server_name": "lab", "uri": URI}}
    assert chat.calls[1] == ("tool_call", read_call)
    assert {name for name, _ in chat.calls[2:]} == {"get_goal"}
    record = run.model.record
    assert (record.read_tool, record.read_via) == ("read_mcp_resource", VIA_RESOURCE_TOOL)
    assert record.bridge == "tool_call" and record.read_calls == 1
    assert record.failure is None and record.saw_v1


async def test_a_deferred_server_tool_is_selected_by_its_name() -> None:
    """Factory Droid 0.225.2 lists the lab's tool (lab___get_review_status) among its
    deferred tools, behind ToolSearch, and offers no resource tool."""
    run = Run(SCORED, **FAST)
    reminder = "Deferred tools:\nWebSearch\nFetchUrl\nlab___get_review_status\n"
    search = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"ToolSearch": search, "Read": {}})
        chat.messages.insert(0, {"role": "user", "content": reminder})
        await chat.turn({"ToolSearch": "loaded"})
        assert chat.calls == [("ToolSearch", {"query": "select:lab___get_review_status"})]
        chat.tools += chat_tools({"lab___get_review_status": {"type": "object"}})
        await chat.until_answer({"lab___get_review_status": V1})
    assert chat.calls[1] == ("lab___get_review_status", {})
    record = run.model.record
    assert record.read_via == VIA_SERVER_TOOL and record.saw_v1 and record.failure is None


async def test_a_read_tool_named_but_never_offered_is_the_runners_failure() -> None:
    run = Run(SCORED, **FAST)
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"Read": {}})
        chat.messages.insert(0, {"role": "user", "content": "deferred:\nReadMcpResourceTool\n"})
        await chat.until_answer({})
    failure = run.model.record.failure
    assert failure is not None and "names its read tool ReadMcpResourceTool" in failure


async def test_without_anything_to_read_with_the_update_is_applied_and_watched() -> None:
    """Copilot without the lab's tool: nothing to read with; the model still waits."""
    run = Run(SCORED, **FAST)
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"bash": {}, "list_bash": {}})
        await chat.until_answer({})
    record = run.model.record
    assert run.updates == 1 and record.read_calls == 0
    assert record.neutral_tool == "list_bash" and record.neutral_calls >= 1
    assert record.failure is None


def test_neutral_and_deferred_tool_picks() -> None:
    assert pick_neutral_tool(["Bash", "TaskList", "TodoWrite"]) == "TaskList"
    assert pick_neutral_tool(["read_mcp_resource", "lab-get_review_status", "bash"]) is None
    assert neutral_arguments(TODO_SCHEMA) == {
        "todos": [{"content": "wait for the review", "status": "pending"}]
    }
    assert deferred_names(["x\nReadMcpResourceTool\nTaskList\n"]) == (
        "ReadMcpResourceTool",
        "TaskList",
    )
    assert deferred_names(["nothing here"]) == (None, None)
    assert search_query("ReadMcpResourceTool", None) == "select:ReadMcpResourceTool"
    assert search_query(None, None) == "read mcp resource"


def test_continues_checklist_is_a_neutral_tool_with_one_open_item() -> None:
    """Continue CLI 1.5.47's Checklist: one markdown string, the whole to-do list."""
    schema = {
        "type": "object",
        "required": ["checklist"],
        "properties": {"checklist": {"type": "string"}},
    }
    assert pick_neutral_tool(["Read", "Bash", "Checklist", "CheckBackgroundJob"]) == "Checklist"
    assert neutral_arguments(schema) == {"checklist": "- [ ] wait for the review"}


async def test_a_cli_asking_before_its_servers_are_up_is_waited_for() -> None:
    """Claude Code under load offers WaitForMcpServers instead of its MCP tools."""
    run = Run(SCORED, **FAST)
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"WaitForMcpServers": {"type": "object", "properties": {}}, "Bash": {}})
        await chat.turn({})
        assert chat.calls == [("WaitForMcpServers", {})]
        chat.tools = chat_tools({"ReadMcpResourceTool": READ_SCHEMA, "TaskList": {}})
        await chat.until_answer({"ReadMcpResourceTool": V1})
    assert chat.calls[1] == ("ReadMcpResourceTool", {"server": "lab", "uri": URI})
    record = run.model.record
    assert record.waits == 1 and record.saw_v1 and record.read_calls == 1


async def test_a_head_anywhere_is_a_quiet_reachability_answer_and_other_paths_are_unserved(
    caplog,
) -> None:
    run = Run()
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        assert (await http.head("/api/hello")).status_code == 200
        assert (await http.get("/api/hello")).status_code == 404
    assert run.model.record.unserved == ["GET /api/hello"]
    noisy = [r.getMessage() for r in caplog.records if r.levelname != "DEBUG"]
    assert noisy == ["[model] no such endpoint: GET /api/hello"]


async def test_a_side_request_that_quotes_the_conversation_is_no_notice() -> None:
    """A title request (no tools: Kilo Code's "Generate a title for this conversation")
    repeats the user's words about the resource: that is not the client telling its
    model of a change."""
    run = Run(SCORED, **FAST)
    async with serve(run.model) as base, httpx2.AsyncClient(base_url=base, timeout=10) as http:
        chat = Chat(http, {"read_mcp_resource": READ_SCHEMA, "todowrite": TODO_SCHEMA})
        await chat.turn({"read_mcp_resource": V1})
        await chat.turn({})  # the update is applied
        title = f"Generate a title for this conversation: read {URI}, tell me if it changed"
        side = {"model": "m", "messages": [{"role": "user", "content": title}]}
        reply = await http.post("/v1/chat/completions", json=side)
        assert reply.status_code == 200
        await chat.until_answer({})
    assert run.model.record.reflected is None
