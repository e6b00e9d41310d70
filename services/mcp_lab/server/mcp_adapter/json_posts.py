"""The adapter's reach into a Streamable HTTP transport's POST handling: the requests
whose handling sends the client nothing before their answer are answered with one
``application/json`` body, the way the SDK's JSON mode answers them, and every other
POST is handed to the SDK's own method (see the package's docstring,
:mod:`mcp_lab.server.mcp_adapter`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import partial
from http import HTTPStatus

import anyio
import pydantic_core
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventMessage,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mcp_lab import protocol
from mcp_lab.server.mcp_adapter.manager import adjust_admitted

logger = logging.getLogger("mcp_lab.server")


def answer_posts_as_json(app: Starlette, quiet: Callable[[str], bool]) -> None:
    """Answer a POST of a request whose method is ``quiet(method)`` with one
    ``application/json`` body, and every other POST as the SDK does (an SSE stream).

    ``quiet`` names the requests whose handling sends the client nothing before
    their answer: their stream would carry one event (two with a priming event) and
    be kept for resumption for nothing. Only a request the SDK would serve gets the
    JSON answer: its ``Accept`` names both ``application/json`` and
    ``text/event-stream`` (the SDK answers any other with 406, as before), its
    ``Content-Type`` is JSON and its session header matches; anything else, and
    every body that is not one valid JSON-RPC request, goes to the SDK's own
    handling unchanged (which answers its errors).

    As in the SDK's JSON mode, the request is dispatched with ``can_send_request``
    false (a server-to-client request in its handler raises ``NoBackChannelError``),
    and a message sent in relation to it has no wire: it is dropped (logged at
    DEBUG) and the response alone is answered. An event store with an
    ``unkept_streams`` set (the lab's :class:`~mcp_lab.server.resume.eventstore.RedisEventStore`)
    is told the request's stream id while it is answered, and keeps nothing of it:
    a JSON body has no event id, so nothing of it can be resumed.
    """
    adjust_admitted(app, lambda transport: _answer_quiet_posts_as_json(transport, quiet))


def _answer_quiet_posts_as_json(
    transport: StreamableHTTPServerTransport, quiet: Callable[[str], bool]
) -> None:
    """Make ``transport`` answer the quiet requests of its POSTs with a JSON body."""
    handle = transport._handle_post_request

    async def handle_post(scope: Scope, request: Request, receive: Receive, send: Send) -> None:
        message = await _quiet_request(transport, request, quiet)
        if message is None:
            await handle(scope, request, receive, send)
        else:
            await _answer_as_json(transport, message, scope, request, receive, send)

    # mypy refuses assigning to a method; replacing it is the point here.
    transport._handle_post_request = handle_post  # type: ignore[method-assign]


async def _quiet_request(
    transport: StreamableHTTPServerTransport, request: Request, quiet: Callable[[str], bool]
) -> JSONRPCRequest | None:
    """The POST's JSON-RPC request when it is to be answered with a JSON body, else None."""
    has_json, has_sse = check_accept_headers(request)
    if not (has_json and has_sse) or not transport._check_content_type(request):
        return None
    # Starlette keeps the body on the request: the SDK's handling reads it from there.
    body = await request.body()
    try:
        raw = pydantic_core.from_json(body)
    except ValueError:
        return None
    if not isinstance(raw, dict) or "id" not in raw:
        return None
    method = raw.get("method")
    if not isinstance(method, str) or not quiet(method):
        return None
    try:
        message = jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        return None
    if not isinstance(message, JSONRPCRequest):
        return None
    if transport.mcp_session_id:
        header = request.headers.get(MCP_SESSION_ID_HEADER)
        if message.method == protocol.INITIALIZE:
            if header is not None and header != transport.mcp_session_id:
                return None
        elif header != transport.mcp_session_id:
            return None
    return message


async def _answer_as_json(
    transport: StreamableHTTPServerTransport,
    message: JSONRPCRequest,
    scope: Scope,
    request: Request,
    receive: Receive,
    send: Send,
) -> None:
    """Dispatch ``message`` and answer its response as one JSON body (the SDK's JSON
    branch, for one request)."""
    writer = transport._read_stream_writer
    if writer is None:
        raise RuntimeError("the transport is not connected")
    request_id = str(message.id)
    unkept: set[str] | None = getattr(transport._event_store, "unkept_streams", None)
    if unkept is not None:
        unkept.add(request_id)
    transport._request_streams[request_id] = anyio.create_memory_object_stream[EventMessage](
        REQUEST_STREAM_BUFFER_SIZE
    )
    reader = transport._request_streams[request_id][1]
    response: Response
    try:
        metadata = transport._message_metadata(
            request,
            on_request_unanswered=partial(transport._terminate_unanswered_request, message.id),
        )
        metadata = dataclasses.replace(metadata, can_send_request=False)
        await writer.send(SessionMessage(message, metadata=metadata))
        while True:
            event_message = await reader.receive()
            if isinstance(event_message.message, JSONRPCResponse | JSONRPCError):
                break
            logger.debug(
                "[lab] dropped a message related to request %s (answered as JSON)", request_id
            )
        response = transport._create_json_response(event_message.message)
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        # The session was terminated while the request was in flight.
        response = transport._create_error_response(
            "Session terminated before the request completed",
            HTTPStatus.INTERNAL_SERVER_ERROR,
            INTERNAL_ERROR,
        )
    except Exception:
        logger.exception("[lab] error answering request %s as JSON", request_id)
        response = transport._create_error_response(
            "Error handling POST request", HTTPStatus.INTERNAL_SERVER_ERROR, INTERNAL_ERROR
        )
    finally:
        await transport._clean_up_memory_streams(request_id)
        if unkept is not None:
            unkept.discard(request_id)
    await response(scope, receive, send)
