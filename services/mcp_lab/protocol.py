"""The names of the protocol the lab relies on, in one place.

MCP's own: the notifications the lab sends, the newest protocol generation (which
has no sessions), the Streamable HTTP session header. And the names of what the lab
records beside a client's messages (its evidence's own events: a GET stream opened,
resumed or closed, a session ended by the server or deleted by the client, a listen
stream closed), and the client name of a session that never said who it is.
"""

from __future__ import annotations

from enum import StrEnum
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
# The lab ended a listen stream without its final result (the dropped-stream scenario).
LISTEN_DROPPED = "subscriptions/listen/dropped"
# A URI a listen named that its acknowledgement left out (the partial-ack scenario).
LISTEN_UNACKNOWLEDGED = "subscriptions/listen/unacknowledged"

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


class Transport(StrEnum):
    """How a client reaches the lab: the one vocabulary of transports.

    The value is what logs, evidence and reports show (``streamable-http``); ``short``
    is the name a person types and reads in a matrix (``mcp-lab clients run --transport
    http``, a client file's ``transports``, the probe's ``--transport``, ``mcp-lab
    server --transport``); ``label`` is how a bridge's direction names its ends
    (``stdio->HTTP``). :meth:`named` reads any of the three.
    """

    STREAMABLE_HTTP = "streamable-http"
    SSE = "sse"
    STDIO = "stdio"

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def label(self) -> str:
        return _LABEL[self]

    @classmethod
    def named(cls, name: str) -> Transport:
        """The transport ``name`` is the value, short name or label of; ValueError
        listing the names otherwise."""
        for transport in cls:
            if name in (transport.value, transport.short, transport.label):
                return transport
        known = ", ".join(t.short for t in cls)
        raise ValueError(f"unknown transport {name!r}; known: {known}")


_SHORT = {Transport.STREAMABLE_HTTP: "http", Transport.SSE: "sse", Transport.STDIO: "stdio"}
_LABEL = {Transport.STREAMABLE_HTTP: "HTTP", Transport.SSE: "SSE", Transport.STDIO: "stdio"}
