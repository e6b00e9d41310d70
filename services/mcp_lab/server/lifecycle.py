"""How long sessions live here: the session cap, and subscribers left by dead replicas.

Idle expiry is the mcp SDK's (see ``mcp_adapter.HttpSessions``): a Streamable
HTTP session with no request in flight and no open GET stream for
``MCP_TEST_SESSION_IDLE_SECONDS`` is closed, and the lab's session-end hook
drops its subscriptions, kept events and registry entries.

**Cap.** At most ``MCP_TEST_MAX_SESSIONS`` sessions are open at once: Streamable
HTTP sessions, legacy SSE sessions and 2026-07-28 listen streams together. The
SDK refuses the request that would open one more Streamable HTTP session with
503; the lab logs it and adds ``Retry-After`` (:class:`SessionCap`), and refuses
an SSE session or a listen stream past the cap itself, the same way. Open
sessions are untouched; room frees up as they end or expire. Each session takes two open
files (its POST connection and its GET stream): at start the server raises its
open-file limit as far as the cap needs and the hard limit allows, and warns
when that is fewer sessions than the cap (:func:`open_files_for`); past it,
connections would fail at ``accept`` with no answer at all.

**Stale subscribers.** The subscriber sets in Redis are shared by all replicas.
A replica records each session it holds with a subscription in its own set
(``contract.replica_sessions_key``). A replica killed without a chance to clean
up leaves its sessions there; once its heartbeat key has expired, any replica
(:func:`sweep_dead_replicas`, at start and every few seconds) drops those
sessions from the subscriber sets, deletes their kept events and owner keys,
and then the replica's set. Subscribers no replica claims (left by a server
older than this, or written by hand) are named in a warning at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_lab import contract, state
from mcp_lab.contract import Peer
from mcp_lab.logs import Throttled
from mcp_lab.process.reconnect import stop_if_cancelled
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab")

# Retry-After on a refusal: room frees up when a session ends or expires.
_RETRY_AFTER_CAP_SECONDS = 60
# Refusals are logged at most this often (a client can make one per request).
_REFUSAL_LOG_SECONDS = 1.0
# Open files per session (its POST connection, its GET stream), and besides sessions
# (Redis pools, the listening socket, logs).
_FILES_PER_SESSION = 2
_FILES_SPARE = 64
DEFAULT_MAX_SESSIONS: int = LabSettings.model_fields["max_sessions"].default
# How often each replica looks for dead replicas' subscribers.
SWEEP_SECONDS = contract.REPLICA_HEARTBEAT_SECONDS / 3

# Set by SessionCap for each request that could open a session; the
# admission hook notes a refusal in it (same task, so the same context).
_refusals: ContextVar[list[int] | None] = ContextVar("mcp_lab_refusals", default=None)


class LongLived:
    """How many legacy SSE sessions and listen streams are open on this server (they
    count in the session cap; ``/healthz`` shows them as ``other_sessions``)."""

    def __init__(self) -> None:
        self.open = 0

    def __call__(self) -> int:
        return self.open


def retry_after_seconds(idle_seconds: float) -> int:
    """The Retry-After of a refusal: the idle time, at most a minute, at least 1 s."""
    return max(1, min(_RETRY_AFTER_CAP_SECONDS, round(idle_seconds)))


def note_refused(open_sessions: int) -> None:
    """Called by the session manager hook when it refuses a new session."""
    marks = _refusals.get()
    if marks is not None:
        marks.append(open_sessions)


class SessionCap:
    """A request that may open a session (a POST to the MCP path without a session
    id: the front door, ``mcp_lab.server.asgi``, sends only those here): logs it
    when it is refused at the cap and adds ``Retry-After`` to its 503."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_sessions: int,
        retry_after: int,
        http_sessions: Callable[[], int] = lambda: 0,
        others: LongLived | None = None,
    ) -> None:
        self._app = app
        self._max = max_sessions
        self._retry_after = str(retry_after).encode()
        self._http_sessions = http_sessions
        # Legacy SSE sessions and listen streams open now (long_lived).
        self.others = others or LongLived()
        self._refusals: dict[str, Throttled] = {}

    def _refused(self, kind: str) -> Throttled:
        """The log of refusals of one kind of session (each throttled on its own)."""
        return self._refusals.setdefault(kind, Throttled(logger, _REFUSAL_LOG_SECONDS))

    async def long_lived(self, scope: Scope, receive: Receive, send: Send, kind: str) -> None:
        """A legacy SSE session or a listen stream (``kind``): counted in the cap
        while it lasts; refused with 503 and ``Retry-After`` past it."""
        open_now = self._http_sessions() + self.others.open
        if open_now >= self._max:
            client = scope.get("client") or ("?", 0)
            self._refused(kind).warning(
                "[lab] session cap reached: %d of %d sessions open; new %s from %s:%s "
                "refused with 503 (Retry-After: %s s)",
                open_now,
                self._max,
                kind,
                client[0],
                client[1],
                self._retry_after.decode(),
            )
            body = json.dumps({"error": f"{open_now} sessions open, the most allowed"}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
                (b"retry-after", self._retry_after),
            ]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.others.open += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self.others.open -= 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        marks: list[int] = []
        token = _refusals.set(marks)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503 and marks:
                headers = [*message.get("headers", []), (b"retry-after", self._retry_after)]
                message = {**message, "headers": headers}
                client = scope.get("client") or ("?", 0)
                self._refused("session").warning(
                    "[lab] session cap reached: %d of %d sessions open; "
                    "new session from %s:%s refused with 503 (Retry-After: %s s)",
                    marks[0] + self.others.open,
                    self._max,
                    client[0],
                    client[1],
                    self._retry_after.decode(),
                )
            await send(message)

        try:
            await self._app(scope, receive, sending)
        finally:
            _refusals.reset(token)


class DeleteLog:
    """DELETE of the MCP path (the front door sends only those here): the client ends
    its session. The session's peer is looked up first (``known``: the app forgets it
    while it ends the session); once the app answered with a 2xx, ``record`` is called
    with it (the lab logs and records ``session/delete``)."""

    def __init__(
        self,
        app: ASGIApp,
        known: Callable[[str], Peer | None],
        record: Callable[[Peer], Awaitable[None]],
    ) -> None:
        self._app = app
        self._known = known
        self._record = record

    async def __call__(self, scope: Scope, receive: Receive, send: Send, session: str) -> None:
        peer = self._known(session) if session else None
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self._app(scope, receive, watch)
        if peer is not None and 200 <= status < 300:
            await self._record(peer)


async def _members(redis: Redis, key: str) -> set[str]:
    """The members of the set ``key``. The server's client decodes replies
    (``state.connect``), so they are str; redis-py types them as bytes or str."""
    return cast(set[str], await redis.smembers(key))


# Told, once per dead replica and by one replica only, the sessions dropped and the
# URIs each was subscribed to.
OnDropped = Callable[[dict[str, list[str]]], Awaitable[None]]


async def sweep_dead_replicas(
    redis: Redis, replica: str, uris: Iterable[str], on_dropped: OnDropped | None = None
) -> int:
    """Drop the subscribers of every replica whose heartbeat is gone; how many.

    A session id that a live replica also holds (a 2026-07-28 client's key is
    shared by its listen streams, on any replica) is kept in the subscriber sets.
    ``on_dropped`` hears of the sessions dropped, from the one replica whose
    sweep removed the dead replica's set (several may sweep at once). Besides
    ``uris`` (the catalog's), every URI with a subscriber set is swept, when there
    is a dead replica: a template's resources are the URIs its clients chose.
    """
    live: set[str] = set()
    dead: list[tuple[str, str]] = []
    async for key in redis.scan_iter(match=contract.REPLICA_SESSIONS_PATTERN, count=100):
        owner = contract.replica_of_sessions_key(key)
        if owner == replica or await redis.exists(contract.replica_heartbeat_key(owner)):
            live.update(await _members(redis, key))
        else:
            dead.append((owner, key))
    swept = set(uris)
    if dead:
        swept |= {
            contract.uri_of_subscribers_key(key)
            async for key in redis.scan_iter(match=contract.SUBSCRIBERS_PATTERN, count=500)
        }
    uris = sorted(swept)
    dropped = 0
    for owner, key in dead:
        stale = sorted(await _members(redis, key) - live)
        pipe = redis.pipeline(transaction=True)
        if stale:
            for uri in uris:  # which of them each session held (for on_dropped)
                pipe.smismember(contract.subscribers_key(uri), stale)
            state.forget_subscriber_in(pipe, stale, uris, kept_events=True)
        pipe.delete(key)
        replies = await pipe.execute()
        dropped += len(stale)
        if stale and on_dropped is not None and replies[-1]:  # this sweep removed the set
            held: dict[str, list[str]] = {session: [] for session in stale}
            for at, uri in enumerate(uris):
                for session, member in zip(stale, replies[at], strict=True):
                    if member:
                        held[session].append(uri)
            await on_dropped(held)
        shown = ", ".join(stale[:5]) + (f" ...({len(stale)})" if len(stale) > 5 else "")
        logger.warning(
            "[lab] replica %s is gone (no heartbeat): dropped its %d subscribed session(s) "
            "from the subscriber sets%s",
            owner,
            len(stale),
            f": {shown}" if stale else "",
        )
    return dropped


async def report_unowned(redis: Redis, uris: Iterable[str]) -> list[str]:
    """Log (and return) subscribers no replica claims: left by a server older than
    replica ownership, or written by hand. They are not removed: a replica of that
    older kind may still hold them."""
    owned: set[str] = set()
    async for key in redis.scan_iter(match=contract.REPLICA_SESSIONS_PATTERN, count=100):
        owned.update(await _members(redis, key))
    unowned: set[str] = set()
    for uri in uris:
        unowned.update(await _members(redis, contract.subscribers_key(uri)) - owned)
    found = sorted(unowned)
    if found:
        shown = ", ".join(found[:5]) + (f" ...({len(found)})" if len(found) > 5 else "")
        logger.warning(
            "[lab] %d subscriber(s) in the subscriber sets belong to no replica (stale, or "
            "from an older server; `redis-cli srem` removes them): %s",
            len(found),
            shown,
        )
    return found


async def sweep_forever(
    redis: Redis,
    replica: str,
    uris: list[str],
    every: float = SWEEP_SECONDS,
    on_dropped: OnDropped | None = None,
) -> None:
    """Run :func:`sweep_dead_replicas` now and every ``every`` seconds until cancelled;
    once, at start, report the subscribers no replica claims."""
    try:
        await sweep_dead_replicas(redis, replica, uris, on_dropped)
        await report_unowned(redis, uris)
    except (RedisError, OSError, UnicodeDecodeError) as exc:
        # UnicodeDecodeError: a member someone wrote into a set by hand.
        logger.warning("[lab] stale subscriber check failed (%s)", exc)
    while True:
        stop_if_cancelled()  # a Redis send may have swallowed the cancellation
        await asyncio.sleep(every)
        try:
            await sweep_dead_replicas(redis, replica, uris, on_dropped)
        except (RedisError, OSError, UnicodeDecodeError) as exc:
            logger.warning("[lab] stale subscriber sweep failed (%s); retrying", exc)


def open_files_for(max_sessions: int) -> str | None:
    """Raise this process's open-file limit (the soft one, at most to the hard one)
    to what ``max_sessions`` sessions take; a warning when it still holds fewer.

    With the default cap (which a lab for a few clients never nears) the shortfall
    is logged here at DEBUG instead and None returned: what someone testing one
    client reads first should be about that client."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_sessions * _FILES_PER_SESSION + _FILES_SPARE
    unlimited = resource.RLIM_INFINITY
    if soft != unlimited and soft < wanted:
        soft = wanted if hard == unlimited else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == unlimited or soft >= wanted:
        return None
    fits = max(0, (soft - _FILES_SPARE) // _FILES_PER_SESSION)
    if max_sessions == DEFAULT_MAX_SESSIONS:
        logger.debug(
            "[lab] open-file limit %d holds about %d sessions (the default "
            "MCP_TEST_MAX_SESSIONS is %d); for load tests raise it (ulimit -n)",
            soft,
            fits,
            max_sessions,
        )
        return None
    return (
        f"open-file limit {soft} holds about {fits} sessions, fewer than "
        f"MCP_TEST_MAX_SESSIONS={max_sessions}: past that, connections fail unanswered; "
        "raise the limit (ulimit -n, or the container's nofile) or lower MCP_TEST_MAX_SESSIONS"
    )
