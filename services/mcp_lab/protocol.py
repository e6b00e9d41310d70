"""The names of the protocol the lab relies on, in one place.

MCP's own: the notifications the lab sends, the newest protocol generation (which
has no sessions), the Streamable HTTP session header. And the names of what the lab
records beside a client's messages (its evidence's own events: a GET stream opened,
resumed or closed, a session ended by the server or deleted by the client, a listen
stream closed), and the client name of a session that never said who it is.
"""

from __future__ import annotations

from typing import Any

INITIALIZE = "initialize"
INITIALIZED = "notifications/initialized"
DISCOVER = "server/discover"  # 2026-07-28's first request (it has no initialize)
# The requests with which a client makes itself known (the start of a session).
CONNECT_METHODS = frozenset({INITIALIZE, DISCOVER})
# The version the lab's own raw clients (tests, benchmarks) ask for.
HANDSHAKE_VERSION = "2025-11-25"
UPDATED = "notifications/resources/updated"
LIST = "resources/list"
TEMPLATES_LIST = "resources/templates/list"
READ = "resources/read"
SUBSCRIBE = "resources/subscribe"
UNSUBSCRIBE = "resources/unsubscribe"
LISTEN = "subscriptions/listen"  # 2026-07-28's subscriptions
# The lab's first message on a listen's stream: what it will send there.
LISTEN_ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
TOOLS_LIST, TOOLS_CALL = "tools/list", "tools/call"
PROMPTS_LIST = "prompts/list"
PING = "ping"
LIST_CHANGED = "notifications/resources/list_changed"
# The generation without sessions, GET streams or resources/subscribe (subscriptions/listen).
MODERN = "2026-07-28"
SESSION_HEADER = "mcp-session-id"
SESSION_HEADER_BYTES = SESSION_HEADER.encode("latin-1")
# JSON-RPC's "method not found" (here so that reading evidence needs no SDK import).
METHOD_NOT_FOUND = -32601
# A session whose initialize (or server/discover) named no client.
UNKNOWN_CLIENT = "unknown"
# The session key of a 2026-07-28 client (``modern:<name>/<version>``): it has no session.
MODERN_SESSION_PREFIX = "modern:"

# The evidence's own events (not messages of a client's).
STREAM_OPEN, STREAM_RESUME = "stream/open", "stream/resume"
STREAM_CLOSE, STREAM_PRIMING = "stream/close", "stream/priming"
SESSION_END = "session/end"  # the server ended it (idle, replica gone)
SESSION_DELETE = "session/delete"  # the client ended it (HTTP DELETE)
LISTEN_CLOSED = "subscriptions/listen/closed"  # a listen stream naming resources ended

# Requests whose handling in the lab sends the client nothing before their answer
# (no progress, log, sampling or elicitation). With ``MCP_TEST_POST_RESPONSES=auto``
# a POST of one of these is answered with one ``application/json`` body: an SSE
# stream would carry its answer and nothing else (docs/dev/performance-notebook.md, "Fast path
# per request"). Any other request keeps its stream: tools/call (progress, logs,
# sampling, elicitation), an unknown method, and resources/subscribe, whose answer
# waits for its Redis writes (in a burst, for its turn in the batch writer): a
# 2025-11-25 client cut off meanwhile resumes that stream from its priming event
# and still gets the answer (tests/system/test_resume.py, the TypeScript SDK cut off).
ANSWERED_AS_JSON = frozenset(
    {
        INITIALIZE,
        PING,
        LIST,
        TEMPLATES_LIST,
        READ,
        UNSUBSCRIBE,
        TOOLS_LIST,
        PROMPTS_LIST,
    }
)


def initialize_request(
    name: str,
    version: str = "0.1",
    protocol_version: str = HANDSHAKE_VERSION,
    request_id: int = 1,
) -> dict[str, Any]:
    """A JSON-RPC ``initialize`` request from a client called ``name`` (its
    ``clientInfo``), asking for ``protocol_version``, with no capabilities."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": INITIALIZE,
        "params": initialize_params(name, version, protocol_version),
    }


def initialize_params(
    name: str, version: str = "0.1", protocol_version: str = HANDSHAKE_VERSION
) -> dict[str, Any]:
    """The ``params`` of :func:`initialize_request`."""
    return {
        "protocolVersion": protocol_version,
        "capabilities": {},
        "clientInfo": {"name": name, "version": version},
    }


def initialized_notification() -> dict[str, Any]:
    """The ``notifications/initialized`` a client sends after its ``initialize``."""
    return {"jsonrpc": "2.0", "method": INITIALIZED}
