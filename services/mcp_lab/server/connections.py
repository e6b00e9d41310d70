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
* **write deadline**: a connection whose client stops reading is closed at the
  socket. uvicorn stops writing to a connection whose buffer is over its
  high-water mark and waits for the client to read; a client that never reads
  held its response (and, once uvicorn "closed" the connection, the socket: an
  asyncio transport closes only once its buffer is written) for as long as it
  stayed connected, with up to the kernel's whole send buffer (4 MB) each.
  Now a connection whose writing stays paused for ``write_timeout`` seconds, or
  that is closing with bytes still unwritten for as long, is aborted; and a
  response that ended unfinished (its app gave up on it, as the dashboard feed
  does on a viewer too far behind) is aborted at once. An abort resets the
  connection (``SO_LINGER`` 0): the kernel lets go of what it held for the
  client at once, where a plain close would keep the socket, orphaned, until
  the client read it all or TCP gave up. A response may also abort its own
  connection, and wait until it is gone, through the handle
  :class:`Connection` in its scope (``scope["extensions"][CONNECTION_EXTENSION]``);
* **accept errors** (``EMFILE`` and the like, were the limit reached anyway) are
  logged once a second, with a count, not once per attempt.

Closed connections are counted and logged (at most every ``_LOG_SECONDS``).
:func:`protocol_class` relies on uvicorn's ``H11Protocol`` (0.55): its
``connection_made``/``connection_lost``, ``handle_events`` starting a new
``cycle`` for each request head (its ``scope``, its task added to ``tasks``,
``response_started``/``response_complete``) and feeding it the body's ``Data``
and ``EndOfMessage``, its h11 connection ``conn``, ``on_response_complete``,
``pause_writing``/``resume_writing``, and the shared ``server_state.connections``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import socket
import struct
from typing import Any, cast

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
# How long a connection's writing may stay stalled (its client reading nothing)
# before the connection is aborted: a client on a slow link still empties the
# buffer's 48 KiB between the high- and low-water marks well within it.
WRITE_TIMEOUT_SECONDS = 30.0
# The key of a request's :class:`Connection` in its ASGI scope's ``extensions``.
CONNECTION_EXTENSION = "mcp_lab.connection"
# SO_LINGER on, 0 s: close() resets the connection and drops what is unsent.
_RESET = struct.pack("ii", 1, 0)


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

    def __init__(
        self,
        max_connections: int,
        head_timeout: float,
        write_timeout: float = WRITE_TIMEOUT_SECONDS,
    ) -> None:
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout
        self._stalled: dict[GuardedProtocol, None] = {}  # stalled longest first
        self._new: dict[GuardedProtocol, None] = {}  # the other new ones, quiet longest first
        self.timed_out = 0
        self.evicted = 0
        self.refused = 0
        self.write_stalled = 0  # aborted: their writing stalled past write_timeout
        self.abandoned = 0  # aborted: their response ended unfinished
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

    def stalled(self, connection: GuardedProtocol) -> None:
        """``connection``'s writing stalled for ``write_timeout``: it is aborted."""
        self.write_stalled += 1
        connection.abort()
        self._note(f"aborted a connection whose client read nothing for {self.write_timeout:g} s")

    def abandoned_response(self, connection: GuardedProtocol) -> None:
        """A response of ``connection`` ended unfinished: aborted (uvicorn's close would
        wait for its client to read what was written)."""
        self.abandoned += 1
        connection.abort()
        self._note("aborted a connection whose response ended unfinished")

    def _note(self, what: str) -> None:
        self._log.warning(
            "[lab] connections: %s (cap %d; so far %d head timeouts, %d closed for room, "
            "%d refused, %d write stalls, %d unfinished responses aborted)",
            what,
            self.max_connections,
            self.timed_out,
            self.evicted,
            self.refused,
            self.write_stalled,
            self.abandoned,
        )


class Connection:
    """What a response may do with the connection it is sent on, from its ASGI scope
    (``scope["extensions"][CONNECTION_EXTENSION]``)."""

    def __init__(self, protocol: GuardedProtocol) -> None:
        self._protocol = protocol

    def abort(self) -> None:
        """Reset the connection now, dropping what its client has not read."""
        self._protocol.abort()

    async def gone(self) -> None:
        """Until the connection is closed (its socket with it)."""
        await self._protocol.lost.wait()


class GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, under a :class:`ConnectionGuard`."""

    guard: ConnectionGuard  # set on the class made by protocol_class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._admitted = False
        self._heard = False  # some bytes have come
        self._proven = False  # a request came whole, or was answered
        self._head_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._aborted = False
        self.lost = asyncio.Event()  # set once the connection is closed

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
        self._cancel_write_timer()
        self.lost.set()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._proven:
            self.guard.heard(self, first=not self._heard)
        self._heard = True
        super().data_received(data)

    def handle_events(self) -> None:
        cycle, tasks = self.cycle, set(self.tasks)
        super().handle_events()
        if self.cycle is not cycle:  # a request head arrived: its request runs
            self._cancel_head_timer()
            # Before its task's first step (it was only created): the app sees it.
            scope = cast(dict[str, Any], self.cycle.scope)
            scope.setdefault("extensions", {})[CONNECTION_EXTENSION] = Connection(self)
            for task in self.tasks - tasks:
                task.add_done_callback(functools.partial(self._response_ended, self.cycle))
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

    def abort(self) -> None:
        """Reset this connection now: its socket closed, what is unwritten dropped, in
        the server and in the kernel."""
        if self._aborted or self.lost.is_set():
            return
        self._aborted = True
        self._cancel_write_timer()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.transport.abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._await_write()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.transport.is_closing():
            self._cancel_write_timer()

    def _response_ended(self, cycle: Any, _: asyncio.Task[None]) -> None:
        """A request's app returned: a response it left unfinished is aborted at once
        (uvicorn closes its connection, which waits for the client to read what was
        written), and a connection closing with bytes unwritten gets the write deadline."""
        if self.lost.is_set() or not self.transport.is_closing():
            return
        if cycle.response_started and not cycle.response_complete and not cycle.disconnected:
            self.guard.abandoned_response(self)
        elif self.transport.get_write_buffer_size():
            self._await_write()

    def _await_write(self) -> None:
        if self._write_timer is None and not self.lost.is_set():
            self._write_timer = self.loop.call_later(
                self.guard.write_timeout, self.guard.stalled, self
            )

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

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
