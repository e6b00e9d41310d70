"""The scripted model's HTTP endpoint on loopback, for running real agent CLIs offline.

It speaks four wire APIs (:mod:`mcp_lab.runners.clients.apis`), streamed as the CLIs expect
them (tool calls included): Anthropic Messages (``POST /v1/messages``), OpenAI
Responses (``POST /v1/responses``), OpenAI Chat Completions (``POST
/v1/chat/completions``) and Gemini (``POST /v1beta/models/M:streamGenerateContent``
and ``:generateContent``). What to answer is
:class:`~mcp_lab.runners.clients.model.ScriptedModel`'s.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_lab.runners import embedded
from mcp_lab.runners.clients.apis import (
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
from mcp_lab.runners.clients.model import ScriptedModel

logger = logging.getLogger("mcp_lab.model")


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
        if request.method == "HEAD":  # a reachability check asks the model nothing
            logger.debug("[model] HEAD %s answered", request.url.path)
            return Response(status_code=200)
        logger.warning("[model] no such endpoint: %s %s", request.method, request.url.path)
        model.unserved(request.method, request.url.path)
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
    """Serve ``model`` on a free loopback port for the duration; yields its base URL."""
    async with embedded.serve(build_app(model)) as url:
        yield url
