"""Every use of fastmcp's or mcp's private attributes, in one place.

FastMCP 4 has no public API for ``resources/subscribe``, for withdrawing the
capabilities it always advertises, or for learning when a client session ends.
The low-level server and the per-session ``Connection`` have them; this module
reaches them, so an upgrade of fastmcp or mcp breaks here and nowhere else.
Checked against the versions in :data:`CHECKED_VERSIONS` (pyproject pins the same;
``tests/server/test_mcp_adapter.py`` fails on any other).

Public SDK behaviour the lab relies on, elsewhere, to re-check on an upgrade:

* ``mcp.server.streamable_http.GET_STREAM_KEY``: the stream id of a session's
  standalone GET stream, as the event store sees it (resume/eventstore.py,
  resume/middleware.py).
* The SSE framing the SDK writes (``event: message``, ``id:``, ``retry:``, ``data:``),
  written by hand for streams the lab serves itself (resume/middleware.py).
* ``mcp.server.subscriptions.InMemorySubscriptionBus`` subclassed per listen stream,
  and ``ListenHandler`` subscribing to it after the acknowledgement (listen.py).
* ``fastmcp.server.http.create_sse_app``: the legacy SSE app mounted beside
  Streamable HTTP, whose lifespan the lab's app runs (app.py).
* ``ServerSession.send_resource_updated`` drops a message silently when no
  stream is open (sessions.py, get_streams.py track streams for the evidence).

Which POSTs are answered with one JSON body (:func:`answer_posts_as_json`, with
``MCP_TEST_POST_RESPONSES=auto``): the SDK decides per transport, from its
``is_json_response_enabled`` flag; the lab decides per request, by replacing a
transport's ``_handle_post_request`` with one that serves the quiet requests the
way the SDK's JSON branch does (``_request_streams``, ``_read_stream_writer``,
``_message_metadata``, ``_terminate_unanswered_request``,
``_clean_up_memory_streams``, ``_create_json_response``, ``_create_error_response``)
and hands every other request to the SDK's own method.

Who writes a session's standalone GET stream (:func:`write_get_streams`): the lab
(``services/mcp_lab/server/get_writer.py``), by replacing a transport's
``_handle_get_request`` with one that does what the SDK's does before it opens the
stream (``check_accept_headers``, ``_validate_request_headers``, 409 when
``_request_streams`` has ``GET_STREAM_KEY``), makes that queue as the SDK does
(``REQUEST_STREAM_BUFFER_SIZE``), frames each event from ``_create_event_data`` and
cleans up with ``_clean_up_memory_streams`` (which closes the reader too, under a
waiting writer); a GET with ``Last-Event-ID`` goes to the SDK's own method.

FastMCP's middleware chain: :func:`typed_hooks_run_now` reads fastmcp 4.2's
``fastmcp.server.middleware.middleware._dispatch_phase`` ContextVar, for the
lab's ``EventLogMiddleware`` that dispatches to its hooks itself (handlers.py).

For a fan-out (one publish to many Streamable HTTP sessions, relay.py) the lab
does the message router's work itself (:class:`GetStream`, :func:`get_stream_of`),
relying on: ``ServerSession._connection`` (its ``session_id`` and ``outbound``);
the loop-mode outbound being a ``JSONRPCDispatcher`` whose ``_write_stream`` is
the transport's ``_write_stream`` and whose ``_closed`` says it dropped out;
``HttpSessions._manager._server_instances``; ``StreamableHTTPServerTransport``'s
``_event_store``, ``is_terminated`` and ``_request_streams[GET_STREAM_KEY]``
(a (send, receive) pair of a memory stream of ``EventMessage``; the router
stores each message before putting it there, and puts it there only when that
stream is open); the SDK building a notification as ``JSONRPCNotification``
from ``notification.model_dump(by_alias=True, mode="json", exclude_none=True)``
and serialising it with ``model_dump_json(by_alias=True, exclude_unset=True)``
(:class:`PreparedNotification`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from functools import partial
from http import HTTPStatus
from importlib import metadata
from typing import Any

import anyio
import mcp_types
import pydantic_core
from anyio.streams.memory import MemoryObjectSendStream
from fastmcp import FastMCP
from fastmcp.server.http import StreamableHTTPASGIApp
from mcp.server.context import ServerMiddleware
from mcp.server.session import ServerSession
from mcp.server.streamable_http import (
    CONTENT_TYPE_SSE,
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import BaseModel, PrivateAttr, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mcp_lab import protocol, sse
from mcp_lab.server import get_writer

logger = logging.getLogger("mcp_lab.server")

# The releases this module (and the behaviour listed above) was checked against.
CHECKED_VERSIONS: dict[str, str] = {"fastmcp": "4.2.3", "mcp": "2.3.0", "mcp-types": "2.3.0"}


def unchecked_versions() -> list[str]:
    """``name installed (checked: X)`` for each SDK package whose installed release
    is not the one this adapter was checked against."""
    found = []
    for name, checked in CHECKED_VERSIONS.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != checked:
            found.append(f"{name} {installed} (checked: {checked})")
    return found


def register_request_handler(
    server: FastMCP,
    method: str,
    params_type: type[BaseModel],
    handler: Callable[[Any, Any], Awaitable[Any]],
) -> None:
    """Serve ``method`` with ``handler(ctx, params)`` on the low-level server.

    The low-level server derives ``resources.subscribe`` in the initialize
    result from the presence of a ``resources/subscribe`` handler.
    """
    server._mcp_server.add_request_handler(method, params_type, handler)


def withdraw_request_handlers(server: FastMCP, methods: Iterable[str]) -> None:
    """Stop serving ``methods``; their capabilities are no longer advertised."""
    for method in methods:
        server._mcp_server._request_handlers.pop(method, None)


def hide_capabilities(server: FastMCP, names: Iterable[str]) -> None:
    """Leave the capabilities ``names`` (``"tools"``, ``"prompts"``) out of what the
    server advertises (initialize and server/discover), though it serves their methods.

    The low-level server derives each capability from the presence of its list
    handler; its ``get_capabilities`` is wrapped to drop them again.
    """
    low = server._mcp_server
    derive = low.get_capabilities
    hidden: dict[str, Any] = dict.fromkeys(names)

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        return derive(*args, **kwargs).model_copy(update=hidden)

    # mypy refuses assigning to a method; wrapping it is the point here.
    low.get_capabilities = get_capabilities  # type: ignore[method-assign]


def on_session_end(session: ServerSession, callback: Callable[[], Awaitable[None]]) -> None:
    """Run ``callback`` once when the client session behind ``session`` ends."""
    session._connection.exit_stack.push_async_callback(callback)


_SESSION_KEY = "mcp_lab_session_id"


def session_key(session: ServerSession) -> str:
    """A stable id of the client session behind ``session``.

    The ``Mcp-Session-Id`` on stateful Streamable HTTP; on transports without one
    (legacy SSE, stdio) an id minted once per session and kept on its connection.
    """
    connection = session._connection
    if connection.session_id:
        return str(connection.session_id)
    state = connection.state
    if _SESSION_KEY not in state:
        state[_SESSION_KEY] = uuid.uuid4().hex
    return str(state[_SESSION_KEY])


def add_inbound_middleware(server: FastMCP, middleware: ServerMiddleware[Any]) -> None:
    """Run ``middleware(ctx, call_next)`` on every inbound JSON-RPC message.

    It sees requests, notifications, ``initialize`` and unknown methods, with raw
    params, before FastMCP's own dispatch.
    """
    server._mcp_server.middleware.insert(0, middleware)


def bind_session_event_stores(
    app: Starlette,
    make_store: Callable[[str], EventStore],
    protocol_of: Callable[[str], str | None],
) -> None:
    """Give every Streamable HTTP session of ``app`` the event store ``make_store(session_id)``,
    and prime its streams by the protocol it negotiated.

    FastMCP hands each session a store that knows only a random prefix, not the
    ``Mcp-Session-Id``; the lab keys what it stores by session id, so that any
    replica can find a session's events. The session manager exists only while
    the app's lifespan runs, so the binding is made when it starts.

    The SDK decides whether a POST response (or a resumed stream) starts with a
    data-less priming event from the request's ``MCP-Protocol-Version`` header
    (2025-03-26 when absent). The lab decides it from ``protocol_of(session_id)``,
    the version the session negotiated, once ``initialize`` has been handled
    (before that, from the version ``initialize`` asks for, as the SDK does).
    """

    def with_store(transport: Any) -> None:
        if transport.mcp_session_id:
            session_id = str(transport.mcp_session_id)
            transport._event_store = make_store(session_id)
            _prime_by_session(transport, lambda: protocol_of(session_id))

    _adjust_admitted(app, with_store)


def _prime_by_session(transport: Any, negotiated: Callable[[], str | None]) -> None:
    """Make ``transport`` mint priming events by the session's negotiated protocol."""
    mint = transport._mint_priming_event

    async def mint_for_session(stream_id: str, protocol_version: str) -> Any:
        return await mint(stream_id, negotiated() or protocol_version)

    transport._mint_priming_event = mint_for_session


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
    _adjust_admitted(app, lambda transport: _answer_quiet_posts_as_json(transport, quiet))


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


def write_get_streams(app: Starlette, closing: asyncio.Event) -> None:
    """Serve each session's standalone GET stream with the lab's own writer
    (:func:`mcp_lab.server.get_writer.serve`) instead of the SDK's sse-starlette
    response; ``closing``, once set, ends every such stream (the server stops).

    Only a GET the SDK would open a stream for: one with ``Last-Event-ID`` (a
    replay), without ``text/event-stream`` in its ``Accept`` (406) or while the
    session's stream is open (409) goes to the SDK's own ``_handle_get_request``,
    as does everything its ``_validate_request_headers`` refuses. The stream is the
    SDK's: its queue ``_request_streams[GET_STREAM_KEY]`` (made as the SDK makes it,
    before the 200 is sent, and cleaned up with ``_clean_up_memory_streams``), each
    event as its ``_create_event_data`` makes it, its headers."""
    _adjust_admitted(app, lambda transport: _write_get_stream(transport, closing))


def _write_get_stream(transport: StreamableHTTPServerTransport, closing: asyncio.Event) -> None:
    """Make ``transport`` serve its standalone GET stream with the lab's writer."""
    handle = transport._handle_get_request

    def event_of(message: EventMessage) -> bytes:
        data = transport._create_event_data(message)
        return sse.frame(data["data"], event=data["event"], event_id=data.get("id"))

    async def handle_get(request: Request, send: Send) -> None:
        if (
            request.headers.get(LAST_EVENT_ID_HEADER)
            or not check_accept_headers(request)[1]
            or GET_STREAM_KEY in transport._request_streams
        ):
            await handle(request, send)
            return
        if not await transport._validate_request_headers(request, send):
            return
        transport._request_streams[GET_STREAM_KEY] = anyio.create_memory_object_stream[
            EventMessage
        ](REQUEST_STREAM_BUFFER_SIZE)
        headers = [
            (b"content-type", CONTENT_TYPE_SSE.encode()),
            (b"cache-control", b"no-cache, no-transform"),
            (b"connection", b"keep-alive"),
            (b"x-accel-buffering", b"no"),
        ]
        if transport.mcp_session_id:
            headers.append((MCP_SESSION_ID_HEADER.encode(), transport.mcp_session_id.encode()))
        try:
            await get_writer.serve(
                transport._request_streams[GET_STREAM_KEY][1],
                request.receive,
                send,
                headers=headers,
                event_of=event_of,
                closing=closing,
            )
        except Exception:
            session = transport.mcp_session_id
            logger.exception("[lab] error in the GET stream of session=%s", session)
        finally:
            await transport._clean_up_memory_streams(GET_STREAM_KEY)

    # mypy refuses assigning to a method; replacing it is the point here.
    transport._handle_get_request = handle_get  # type: ignore[method-assign]


class HttpSessions:
    """What the lab needs to know of the Streamable HTTP session manager of an app.

    Relies on mcp 2.3's ``StreamableHTTPSessionManager``: its ``max_sessions`` is
    read on each admission (FastMCP 4 does not pass it, so it is set on the
    manager once it exists); ``_server_instances`` maps the open session ids to
    their transports; ``_admit_session`` returns None for a session refused at
    the limit (the manager then answers 503); each transport's ``idle_scope``
    is cancelled once no request has been in flight (an open GET stream counts)
    for ``session_idle_timeout``, which ends the session, runs its connection's
    exit stack (``on_session_end``) while the transport is still in
    ``_server_instances``, and afterwards makes its id answer 404.
    """

    def __init__(self) -> None:
        self._manager: StreamableHTTPSessionManager | None = None

    def open(self) -> int:
        """Sessions open now (0 before the app has started)."""
        return 0 if self._manager is None else len(self._manager._server_instances)

    def expired_idle(self, session_id: str) -> bool:
        """Whether the session ``session_id`` is ending because it was idle too long."""
        if self._manager is None:
            return False
        transport = self._manager._server_instances.get(session_id)
        scope = getattr(transport, "idle_scope", None)
        return scope is not None and bool(scope.cancel_called)

    def bind(
        self,
        app: Starlette,
        max_sessions: int,
        on_refused: Callable[[int], None],
        others: Callable[[], int] = lambda: 0,
    ) -> None:
        """Watch ``app``'s session manager from when its lifespan starts: at most
        ``max_sessions`` open, counting ``others()`` (sessions of other kinds) in;
        ``on_refused(open_count)`` for each one refused."""

        @contextmanager
        def watching(manager: StreamableHTTPSessionManager) -> Iterator[None]:
            manager.max_sessions = max_sessions
            admit = manager._admit_session

            def admit_or_refuse(requestor: Any) -> Any:
                open_now = len(manager._server_instances)
                if open_now + others() >= max_sessions:
                    on_refused(open_now)
                    return None  # the manager answers 503, as at its own limit
                transport = admit(requestor)
                if transport is None:
                    on_refused(open_now)
                return transport

            # mypy refuses assigning to a method; replacing it is the point here.
            manager._admit_session = admit_or_refuse  # type: ignore[method-assign]
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

        _while_serving(app, watching)


def _while_serving(
    app: Starlette,
    serving: Callable[[StreamableHTTPSessionManager], AbstractContextManager[None]],
) -> None:
    """Enter ``serving(manager)`` with ``app``'s session manager once the app's lifespan
    has started (FastMCP creates the manager with the app and runs it in its lifespan),
    and leave it as the lifespan ends."""
    endpoint = _streamable_endpoint(app)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(starlette: Starlette) -> AsyncIterator[Any]:
        async with inner(starlette) as state:
            with serving(_session_manager(endpoint)):
                yield state

    app.router.lifespan_context = lifespan


def _adjust_admitted(app: Starlette, adjust: Callable[[Any], None]) -> None:
    """``adjust(transport)`` for each Streamable HTTP session ``app``'s session manager
    admits (a session refused gets no transport), before its first request is handled."""

    @contextmanager
    def adjusting(manager: StreamableHTTPSessionManager) -> Iterator[None]:
        admit = manager._admit_session

        def admit_adjusted(requestor: Any) -> Any:
            transport = admit(requestor)
            if transport is not None:
                adjust(transport)
            return transport

        # mypy refuses assigning to a method; replacing it is the point here.
        manager._admit_session = admit_adjusted  # type: ignore[method-assign]
        yield

    _while_serving(app, adjusting)


def _streamable_endpoint(app: Starlette) -> StreamableHTTPASGIApp:
    """The Streamable HTTP endpoint among ``app``'s routes."""
    endpoints = (getattr(route, "endpoint", None) for route in app.router.routes)
    return next(e for e in endpoints if isinstance(e, StreamableHTTPASGIApp))


def _session_manager(endpoint: StreamableHTTPASGIApp) -> StreamableHTTPSessionManager:
    """The endpoint's session manager, which FastMCP creates with the app."""
    manager = endpoint.session_manager
    if manager is None:
        raise RuntimeError("the Streamable HTTP endpoint has no session manager")
    return manager


def typed_hooks_run_now() -> bool:
    """Whether the FastMCP middleware chain running now dispatches the per-method
    hooks (``on_read_resource``, ``on_initialize``...), not only ``on_message``/
    ``on_request``.

    Relies on fastmcp 4.2's ``_dispatch_phase`` ContextVar (``"all"``, ``"typed"``
    or ``"outer"``), which the base ``Middleware.__call__`` reads the same way; a
    middleware that overrides ``__call__`` reads it here.
    """
    from fastmcp.server.middleware.middleware import _dispatch_phase

    return _dispatch_phase.get() in ("all", "typed")


# ------------------------------------------------------------ fan-out, one publish to many


class PreparedNotification(JSONRPCNotification):
    """A JSON-RPC notification serialised once, however many streams carry it.

    The SDK serialises each message it writes to a Streamable HTTP stream with
    ``model_dump_json(by_alias=True, exclude_unset=True)``, and the lab's event
    store keeps the same form (``resume.eventstore.encode``). For a publish to
    thousands of sessions that is the same text thousands of times: this model
    answers that exact call with the text made when it was built (any other
    call is pydantic's own). Build it with :func:`prepared_notification`.
    """

    _json: str = PrivateAttr(default="")

    def model_dump_json(self, **kwargs: Any) -> str:
        if self._json and kwargs == _SDK_DUMP:
            return self._json
        return super().model_dump_json(**kwargs)


_SDK_DUMP: dict[str, Any] = {"by_alias": True, "exclude_unset": True}


def prepared_notification(notification: mcp_types.ServerNotification) -> PreparedNotification:
    """``notification`` as the JSON-RPC message ``ServerSession.send_notification``
    would write for it (params dumped as the SDK dumps them), serialised once."""
    data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
    params = data.get("params")
    if params is not None:
        message = PreparedNotification(jsonrpc="2.0", method=data["method"], params=dict(params))
    else:
        message = PreparedNotification(jsonrpc="2.0", method=data["method"])
    message._json = JSONRPCNotification.model_dump_json(message, **_SDK_DUMP)
    return message


class GetStream:
    """The standalone GET stream of one Streamable HTTP session, written to without
    going through the session's write stream.

    ``ServerSession.send_notification`` dumps a pydantic notification, builds a
    JSON-RPC message, and hands it through the session's write stream to the
    transport's message router, which stores it in the session's event store
    and then puts ``EventMessage(message, event_id)`` on the GET stream's queue
    (``transport._request_streams[GET_STREAM_KEY]``) if that stream is open. A
    fan-out does the router's two steps itself, for many sessions at once, with
    one prepared message: the same store, the same queue, the same SSE event.
    Only for a session served in loop mode by a ``JSONRPCDispatcher`` whose write
    stream is this transport's (checked in :func:`get_stream_of`).
    """

    __slots__ = ("_dispatcher", "_transport")

    def __init__(self, transport: StreamableHTTPServerTransport, dispatcher: Any) -> None:
        self._transport = transport
        self._dispatcher = dispatcher

    @property
    def usable(self) -> bool:
        """Whether the session still takes messages (the SDK would not drop them)."""
        return not self._transport.is_terminated and not self._dispatcher._closed

    @property
    def event_store(self) -> EventStore | None:
        """The session's event store (None: not resumable)."""
        store: EventStore | None = self._transport._event_store
        return store

    def queue(self) -> MemoryObjectSendStream[EventMessage] | None:
        """The open GET stream's queue (None: no GET stream open now)."""
        pair = self._transport._request_streams.get(GET_STREAM_KEY)
        return None if pair is None else pair[0]


def get_stream_of(sessions: HttpSessions, session: ServerSession) -> GetStream | None:
    """The :class:`GetStream` of the Streamable HTTP session behind ``session``, or
    None when its notifications must go through the SDK (another transport, the
    2026 era's notify-only channel, a session the manager no longer holds)."""
    manager = sessions._manager
    session_id = session._connection.session_id
    if manager is None or not session_id:
        return None
    transport = manager._server_instances.get(str(session_id))
    outbound = session._connection.outbound
    if not isinstance(transport, StreamableHTTPServerTransport) or not isinstance(
        outbound, JSONRPCDispatcher
    ):
        return None
    if outbound._write_stream is not transport._write_stream:
        return None
    return GetStream(transport, outbound)
