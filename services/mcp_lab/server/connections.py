"""The server's TCP connections: a cap under the open-file limit, a deadline for
request heads, and accept errors logged at most once a second.

uvicorn bounds the time a keep-alive connection may sit idle between requests
(``MCP_TEST_KEEP_ALIVE_SECONDS``) but not the time a client takes to send a
request head or its body, and it takes every connection the kernel hands it. A
client that opens connections and sends their heads (or bodies) a byte at a time,
or nothing, then holds open files until accept fails (``EMFILE``), and asyncio
logs each failed accept with a traceback, many times a second. So:

* **head deadline**: a connection must finish each request head within
  ``MCP_TEST_HEAD_TIMEOUT_SECONDS`` of opening (or of its previous response
  ending), else it is closed. The body's deadline
  (``MCP_TEST_BODY_TIMEOUT_SECONDS``) is kept where the body is read, by the
  guard (:mod:`mcp_lab.server.guard`), which answers 408 and closes;
* **cap**: at most :func:`connection_cap` connections are open. A new connection
  past it takes the place of the oldest one still *waiting*: for its request
  head, or for the rest of a request body (h11's ``their_state`` still
  ``SEND_BODY``); that one is closed, so slow senders cannot lock others out.
  A connection keeps its place in that line from when it began to wait for its
  head. When every open connection is busy (a request whose body has all come,
  or a stream), the new one is closed at once. The cap stays below the
  open-file limit, so accept does not fail;
* **accept errors** (``EMFILE`` and the like, were the limit reached anyway) are
  logged once a second, with a count, not once per attempt.

Closed connections are counted and logged (at most every ``_LOG_SECONDS``).
:func:`protocol_class` relies on uvicorn's ``H11Protocol`` (0.55): its
``connection_made``/``connection_lost``, ``handle_events`` starting a new
``cycle`` for each request head and feeding it the body's ``Data`` and
``EndOfMessage``, its h11 connection ``conn``, ``on_response_complete``, and the
shared ``server_state.connections``.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcp_lab.logs import Throttled
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.server")

_LOG_SECONDS = 10.0
_ACCEPT_LOG_SECONDS = 1.0
# Open files kept for what is not a client connection (the listening socket,
# Redis pools and pub/sub, logs, the Python runtime), besides the Redis pool's size.
_FILES_SPARE = 64
_MIN_CONNECTIONS = 16
# Connections per session (its POST connection and its GET stream), and besides them.
_PER_SESSION = 2
_BESIDES_SESSIONS = 256
_ACCEPT_FAILED = "socket.accept() out of system resource"


def connection_cap(settings: LabSettings) -> tuple[int, str | None]:
    """The most connections to hold open, and a warning when the open-file limit
    holds fewer than ``MCP_TEST_MAX_CONNECTIONS`` asks for. When that is 0: as many
    as the open-file limit leaves room for (the server raised it for its session
    cap at start: ``lifecycle.open_files_for``), or without a limit two per
    session of the cap and 256 more."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        wanted = settings.max_connections or settings.max_sessions * _PER_SESSION
        return wanted + (0 if settings.max_connections else _BESIDES_SESSIONS), None
    fits = max(_MIN_CONNECTIONS, soft - _FILES_SPARE - settings.redis_max_connections)
    wanted = settings.max_connections
    if not wanted:
        return fits, None
    if fits >= wanted:
        return wanted, None
    return fits, (
        f"open-file limit {soft} leaves room for {fits} connections, fewer than the "
        f"{wanted} wanted: past them a new connection takes the place of one still "
        "sending its request head, or is closed"
    )


class ConnectionGuard:
    """What the connections of one server share: the cap, the head deadline, and
    the connections waiting for their request head or the rest of its body
    (oldest first)."""

    def __init__(self, max_connections: int, head_timeout: float) -> None:
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self._waiting: dict[GuardedProtocol, None] = {}
        self.timed_out = 0
        self.evicted = 0
        self.refused = 0
        self._log = Throttled(logger, _LOG_SECONDS)

    def admit(self, connection: GuardedProtocol, open_now: int) -> bool:
        """Whether ``connection`` may open (``open_now`` are open already); at the
        cap the oldest one waiting for its head or body is closed to make room."""
        if open_now < self.max_connections:
            return True
        if self._waiting:
            oldest = next(iter(self._waiting))
            self.done(oldest)
            oldest.close()
            self.evicted += 1
            self._note("closed the connection that waited longest for its request head or body")
            return True
        self.refused += 1
        self._note("closed a new connection: every open one is busy")
        return False

    def waiting(self, connection: GuardedProtocol) -> None:
        """``connection`` waits (for a request head); one already waiting keeps its place."""
        self._waiting.setdefault(connection, None)

    def done(self, connection: GuardedProtocol) -> None:
        """``connection`` no longer waits: its request (head and body) all came, or it closed."""
        self._waiting.pop(connection, None)

    def timeout(self, connection: GuardedProtocol) -> None:
        self.done(connection)
        connection.close()
        self.timed_out += 1
        self._note(f"closed a connection without a request head after {self.head_timeout:g} s")

    def _note(self, what: str) -> None:
        self._log.warning(
            "[lab] connections: %s (cap %d; so far %d head timeouts, %d closed for room, "
            "%d refused)",
            what,
            self.max_connections,
            self.timed_out,
            self.evicted,
            self.refused,
        )


class GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, under a :class:`ConnectionGuard`."""

    guard: ConnectionGuard  # set on the class made by protocol_class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._admitted = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_coming = False  # a request head came, and the rest of its body may not have

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.guard.admit(self, len(self.connections)):
            transport.abort()
            return
        self._admitted = True
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted:
            return
        self._stop_waiting()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request head arrived: its request runs
            self._cancel_head_timer()
            self._body_coming = True
            self.guard.waiting(self)  # for its body (in its place if it waited for the head)
        if self._body_coming and self.conn.their_state is not h11.SEND_BODY:
            self._body_coming = False
            if self.cycle is not None and not self.cycle.response_complete:
                self.guard.done(self)  # head and body have all come: busy, not waiting

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.cycle is None:
            return
        if self.cycle.response_complete:  # no pipelined request started: wait for the next head
            self._await_head()

    def close(self) -> None:
        """Close this connection (its request head did not come in time, or the cap
        needs its place)."""
        if not self.transport.is_closing():
            self.transport.close()

    def _await_head(self) -> None:
        self._stop_waiting()
        self.guard.waiting(self)
        self._head_timer = self.loop.call_later(self.guard.head_timeout, self.guard.timeout, self)

    def _stop_waiting(self) -> None:
        self.guard.done(self)
        self._cancel_head_timer()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


def protocol_class(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's ``Config(http=...)``, its connections under ``guard``."""
    return type("LabHTTPProtocol", (GuardedProtocol,), {"guard": guard})


def log_accept_errors_once_a_second(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop`` log a failed accept (out of open files) at most once a second,
    without its traceback; other errors go to the loop's own handler."""
    throttled = Throttled(logger, _ACCEPT_LOG_SECONDS)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == _ACCEPT_FAILED:
            exc = context.get("exception")
            throttled.warning("[lab] cannot accept a connection: %s", exc)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
