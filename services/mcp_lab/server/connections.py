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
* **cap**: at most :func:`connection_cap` connections are open. Past it, what
  to close is chosen by :class:`ConnectionGuard` (its docstring): a connection
  that has sent a whole request outlasts every connection that has not, so slow
  senders, however fast they reconnect, take places only from each other and
  from nobody who has been served. The cap stays below the open-file limit, so
  accept does not fail;
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
        f"{wanted} wanted: past them a new connection takes the place of one that "
        "has not sent a whole request, or is closed"
    )


# h11's state of the client once its request came whole (head and body).
_REQUEST_WHOLE = (h11.DONE, h11.MUST_CLOSE)


class ConnectionGuard:
    """What the connections of one server share: the cap, the head deadline, and
    the connections that have not sent a whole request yet, in the order they
    are closed for room.

    Which connection the cap closes. A connection is *new* from its opening until
    one request of it has come whole (its head and all its body) or has been
    answered; from then on it is *proven*, for as long as it stays open (busy, or
    idle between requests as a keep-alive connection is). When a connection
    arrives at the cap, a new connection is closed to make room:

    1. one that has *stalled*: its first bytes came, they were not a whole
       request, and nothing more has come since (the one stalled longest);
    2. else the one quiet longest: since it opened, if nothing has come from it
       (a client's head may be on its way), or since more than its first bytes
       came (a request arriving in pieces keeps its place while it moves).

    A proven connection is never closed for room; only when every open connection
    is proven is the newcomer itself closed (it is the one that has sent nothing).

    So slow senders (nothing sent, part of a head, or a head and part of a body)
    that reconnect the moment they are closed churn through the new places only,
    and a client's keep-alive connection between its requests is not one of them.
    What bounds a proven connection instead: uvicorn's keep-alive timeout while it
    is idle, the head deadline (:meth:`timeout`) for each next head, the guard's
    body deadline for each next body. The prices: proven connections holding the
    whole cap keep newcomers out until they free their places; a new connection
    that stays quiet while (cap - proven) others arrive may be closed before its
    head comes; and a request whose first piece came alone is, until its next
    piece, first in line (as a stalled sender is).
    """

    def __init__(self, max_connections: int, head_timeout: float) -> None:
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self._stalled: dict[GuardedProtocol, None] = {}  # stalled longest first
        self._new: dict[GuardedProtocol, None] = {}  # the other new ones, quiet longest first
        self.timed_out = 0
        self.evicted = 0
        self.refused = 0
        self._log = Throttled(logger, _LOG_SECONDS)

    def admit(self, connection: GuardedProtocol, open_now: int) -> bool:
        """Whether ``connection`` may open (``open_now`` are open already); at the
        cap a new one is closed to make room (the class docstring says which), or,
        when every open one is proven, ``connection`` may not."""
        if open_now >= self.max_connections:
            line = self._stalled or self._new
            if not line:
                self.refused += 1
                self._note("closed a new connection: every open one has sent a whole request")
                return False
            slowest = next(iter(line))
            self.closed(slowest)
            slowest.close()
            self.evicted += 1
            self._note("closed the slowest connection without a whole request, for room")
        self._new[connection] = None
        return True

    def heard(self, connection: GuardedProtocol, first: bool) -> None:
        """Bytes of new ``connection`` came, its ``first`` ones or more: stalled
        until more come, or last in the line of the others."""
        if connection in self._new or connection in self._stalled:
            self.closed(connection)
            (self._stalled if first else self._new)[connection] = None

    def proven(self, connection: GuardedProtocol) -> None:
        """A request of ``connection`` came whole, or was answered: it is not closed for room."""
        self.closed(connection)

    def closed(self, connection: GuardedProtocol) -> None:
        """``connection`` closed (or is closing)."""
        self._new.pop(connection, None)
        self._stalled.pop(connection, None)

    def timeout(self, connection: GuardedProtocol) -> None:
        self.closed(connection)
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
        self._heard = False  # some bytes have come
        self._proven = False  # a request came whole, or was answered
        self._head_timer: asyncio.TimerHandle | None = None

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
        self.guard.closed(self)
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._proven:
            self.guard.heard(self, first=not self._heard)
        self._heard = True
        super().data_received(data)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request head arrived: its request runs
            self._cancel_head_timer()
        if not self._proven and self.conn.their_state in _REQUEST_WHOLE:
            self._prove()

    def on_response_complete(self) -> None:
        if not self._proven:
            self._prove()  # answered (a response may come before all its body)
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

    def _prove(self) -> None:
        self._proven = True
        self.guard.proven(self)

    def _await_head(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.guard.head_timeout, self.guard.timeout, self)

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
