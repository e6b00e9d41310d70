"""Every use of fastmcp's or mcp's private attributes, in one place: this package.

FastMCP 4 has no public API for ``resources/subscribe``, for withdrawing the
capabilities it always advertises, or for learning when a client session ends.
The low-level server and the per-session ``Connection`` have them; this package
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
* The SDK building a notification as ``JSONRPCNotification`` from
  ``notification.model_dump(by_alias=True, mode="json", exclude_none=True)`` and
  serialising it with ``model_dump_json(by_alias=True, exclude_unset=True)``, which
  the relay's fan-out answers with text made once (``PreparedNotification``, fanout.py).

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

For a fan-out (one publish to many Streamable HTTP sessions, fanout.py) the lab
does the message router's work itself (:class:`GetStream`, :func:`get_stream_of`),
relying on: ``ServerSession._connection`` (its ``session_id`` and ``outbound``);
the loop-mode outbound being a ``JSONRPCDispatcher`` whose ``_write_stream`` is
the transport's ``_write_stream`` and whose ``_closed`` says it dropped out;
``HttpSessions._manager._server_instances``; ``StreamableHTTPServerTransport``'s
``_event_store``, ``is_terminated`` and ``_request_streams[GET_STREAM_KEY]``
(a (send, receive) pair of a memory stream of ``EventMessage``; the router
stores each message before putting it there, and puts it there only when that
stream is open).

The modules: ``lowlevel`` (the low-level server's handlers, capabilities and
middleware, FastMCP's middleware phase, a session's connection), ``manager`` (the
Streamable HTTP session manager: :class:`HttpSessions`, and the hook on each
transport it admits), ``transport`` (a transport's event store, priming events and
GET stream), ``json_posts`` (POSTs answered with one JSON body) and ``get_stream``
(a session's GET stream written to by a fan-out) and ``stdio_eras`` (the stdio
connection, serving both protocol eras: :func:`serve_stdio`). Import the names from
the package.
"""

from __future__ import annotations

from importlib import metadata

from mcp_lab.server.mcp_adapter.get_stream import GetStream, get_stream_of
from mcp_lab.server.mcp_adapter.json_posts import answer_posts_as_json
from mcp_lab.server.mcp_adapter.lowlevel import (
    add_inbound_middleware,
    hide_capabilities,
    on_session_end,
    register_request_handler,
    session_key,
    set_cache_hints,
    typed_hooks_run_now,
    withdraw_request_handlers,
)
from mcp_lab.server.mcp_adapter.manager import HttpSessions
from mcp_lab.server.mcp_adapter.stdio_eras import end_stdio_wire, serve_stdio
from mcp_lab.server.mcp_adapter.transport import bind_session_event_stores, write_get_streams

__all__ = [
    "CHECKED_VERSIONS",
    "GetStream",
    "HttpSessions",
    "add_inbound_middleware",
    "answer_posts_as_json",
    "bind_session_event_stores",
    "end_stdio_wire",
    "get_stream_of",
    "hide_capabilities",
    "on_session_end",
    "register_request_handler",
    "serve_stdio",
    "session_key",
    "set_cache_hints",
    "typed_hooks_run_now",
    "unchecked_versions",
    "withdraw_request_handlers",
    "write_get_streams",
]

# The releases this package (and the behaviour listed above) was checked against.
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
