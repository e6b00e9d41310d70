"""The server's service: the ``Lab`` its handlers share (subscribe, read, forget a
subscriber, clean up an ended session), and the errors clients get from it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from fastmcp import Context
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.streamable_http import GET_STREAM_KEY
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, RedisError

from mcp_lab import contract, protocol, state, untrusted
from mcp_lab.catalog import Catalog
from mcp_lab.contract import Peer, Transport
from mcp_lab.evidence.recorder import Recorder
from mcp_lab.logs import event
from mcp_lab.process.writer import BatchWriter
from mcp_lab.scenarios.scenario import Scenario
from mcp_lab.server import lifecycle, mcp_adapter
from mcp_lab.server.peers import make_peer
from mcp_lab.server.relay import Relay
from mcp_lab.server.restore import StoreRestore
from mcp_lab.server.resume.eventstore import RedisEventStore
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from mcp_lab.server.store_health import STORE_ERROR, StoreHealth
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.server")

# MCP's "resource not found" (2025-11-25 and before); the JSON-RPC codes come from mcp_types.
RESOURCE_NOT_FOUND = -32002


def not_found(uri: str, protocol_version: str) -> MCPError:
    """The "unknown resource" error of the negotiated protocol generation; its
    ``data.uri`` names the URI, cut to ``untrusted.URI_CHARS`` (the answer is also
    kept for resumption)."""
    code = (
        mcp_types.INVALID_PARAMS
        if protocol_version in MODERN_PROTOCOL_VERSIONS
        else RESOURCE_NOT_FOUND
    )
    data = {"uri": untrusted.cut(uri, untrusted.URI_CHARS)}
    return MCPError(code=code, message="Resource not found", data=data)


async def bounded_error_data(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
    """A low-level middleware: an error's ``data`` string cut to ``untrusted.URI_CHARS``.
    The SDK answers an unknown method with the method name as ``data``, whole (a
    client may send a megabyte of it), and the answer is also kept for resumption."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        data = exc.error.data
        if isinstance(data, str) and len(data) > untrusted.URI_CHARS:
            cut = untrusted.cut(data, untrusted.URI_CHARS)
            raise MCPError(code=exc.error.code, message=exc.error.message, data=cut) from None
        raise


def subscription_limit(uri: str, limit: int) -> MCPError:
    """The error of a subscribe past the session's limit of subscriptions."""
    return MCPError(
        code=contract.SUBSCRIPTION_LIMIT_ERROR,
        message=f"Subscription limit reached: this session already holds {limit} "
        "subscriptions (unsubscribe from one first)",
        data={"uri": untrusted.cut(uri, untrusted.URI_CHARS), "limit": limit},
    )


def redis_failed(exc: Exception) -> MCPError:
    """The error a client gets while Redis cannot be reached (or refuses a write).

    An outage the server's probe sees (:class:`state.StoreUnavailable`, a refused
    connection, a full Redis) has its own log lines (:mod:`mcp_lab.server.store_health`):
    its requests log nothing more than DEBUG, and FastMCP's traceback of a failed read
    is dropped (:class:`QuietStoreErrors`)."""
    known = isinstance(exc, state.StoreUnavailable | OutOfMemoryError | RedisConnectionError)
    logger.log(logging.DEBUG if known else logging.ERROR, "[lab] redis unavailable: %s", exc)
    error = MCPError(
        code=mcp_types.INTERNAL_ERROR, message=f"Lab state store (Redis) unavailable: {exc}"
    )
    setattr(error, STORE_ERROR, True)
    return error


@dataclass
class Lab:
    """The server's moving parts, shared by its handlers."""

    settings: LabSettings
    redis: Redis
    registry: SessionRegistry
    recorder: Recorder
    relay: Relay
    replica: str
    catalog: Catalog
    writer: BatchWriter
    scenario: Scenario
    http_sessions: mcp_adapter.HttpSessions = field(default_factory=mcp_adapter.HttpSessions)
    # Legacy SSE sessions and listen streams open (in the session cap with http_sessions).
    long_lived: lifecycle.LongLived = field(default_factory=lifecycle.LongLived)
    # Redis clean-ups of ended sessions still running (see clean_up_later).
    cleanups: set[asyncio.Task[None]] = field(default_factory=set)
    # Set when the HTTP server starts to stop: the GET streams the lab writes end
    # (mcp_adapter.write_get_streams), so that no open stream holds the shutdown up.
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    # Whether Redis answers (its probe runs in the lifespan); bounds the Redis work
    # of every request (see mcp_lab.server.store_health).
    health: StoreHealth = field(default_factory=lambda: StoreHealth(None))

    def __post_init__(self) -> None:
        # The restore hook: each time the relay has (re)subscribed, a Redis that came
        # back without its data is given this replica's subscriptions again.
        self.relay.on_subscribed = StoreRestore(self).check

    def read_level(self, peer: Peer, uri: str, version: int) -> int:
        """The level of a read's ``[resources/read]`` line: INFO for a session's first
        read of ``uri`` at ``version``, DEBUG for a repeat of it (the lines that tell a
        run, version 1 and the re-read of version 2, stay; a client reading in a loop
        does not fill the log). Every read keeps its evidence record either way."""
        repeat = self.registry.repeated_read(peer.session, uri, version)
        return logging.DEBUG if repeat else logging.INFO

    def peer(self, ctx: Context, init: Any = None) -> Peer:
        """The peer behind a FastMCP handler's context (``init``: the params of
        the ``initialize`` being handled, if it is one)."""
        request = ctx.request_context.request if ctx.request_context is not None else None
        info = getattr(init, "client_info", None)
        requested = getattr(init, "protocol_version", None)
        return make_peer(ctx.session, request, self.settings.path, info, requested)

    def peer_of_request(self, ctx: ServerRequestContext[Any], client_info: Any) -> Peer:
        """The peer behind a low-level request context."""
        requested = None
        if ctx.method == protocol.INITIALIZE and isinstance(ctx.params, dict):
            requested = ctx.params.get("protocolVersion")
        return make_peer(ctx.session, ctx.request, self.settings.path, client_info, requested)

    def protocol_of(self, session: str) -> str | None:
        """The protocol ``session`` negotiated, once its ``initialize`` was handled here."""
        peer = self.registry.peer(session)
        return peer.protocol if peer is not None else None

    def scope(self, peer: Peer) -> str:
        return contract.scope_of(peer.session, self.settings.state_scope)

    async def subscribe(self, subscriber: Subscriber, uri: str) -> str:
        """The one subscribe path, for ``resources/subscribe`` and ``subscriptions/listen``:
        register ``subscriber`` for ``uri`` here, note the version it starts from,
        record it in Redis and queue its update. Returns the job id; on a Redis error
        the registration is undone and the client gets the error.

        Its Redis work goes through the batch writer (two submits: the read, then
        the writes), not through the pool one command at a time: a burst of
        subscribes queues in the writer and waits its turn, where each of four pool
        commands per subscribe waited for a connection at most
        ``MCP_TEST_REDIS_POOL_TIMEOUT_SECONDS`` and a loaded burst of ~10,000 was
        refused "No connection available." past it.

        A session holds at most ``MCP_TEST_MAX_SUBSCRIPTIONS_PER_SESSION`` subscriptions
        (its streams together): one more gets :func:`subscription_limit`."""
        self._check_limit(subscriber, uri)
        registered = self.registry.subscribe(subscriber, uri)
        try:
            version = (await self.read(subscriber.peer, uri, batched=True))[0]
            registered.known[uri] = version
            registered.since[uri] = (version, int(time.time() * 1000))
            return await self._schedule_update(subscriber.peer, uri)
        except MCPError:
            self.registry.unsubscribe(registered.key, uri)
            raise

    def _check_limit(self, subscriber: Subscriber, uri: str) -> None:
        """Refuse a new subscription past the session's limit (a repeated one is not new)."""
        session = subscriber.peer.session
        limit = self.settings.max_subscriptions_per_session
        if self.registry.subscriptions(session) < limit:
            return
        if any(subscriber.key == s.key for s in self.registry.subscribers(uri, session)):
            return
        event(
            protocol.SUBSCRIBE,
            f"uri={untrusted.cut(uri, untrusted.URI_CHARS)}",
            subscriber.peer,
            f"error=limit ({limit} subscriptions held)",
        )
        raise subscription_limit(uri, limit)

    async def _schedule_update(self, peer: Peer, uri: str) -> str:
        """Record ``peer`` as subscribed to ``uri`` and queue the scenario's jobs for it
        (its update, or its timeline: one submit to the batch writer, its commands in
        this order); the job ids, comma-separated."""
        delay = self.settings.update_delay_seconds
        jobs = self.scenario.jobs(uri, self.scope(peer), delay)
        for job in jobs:
            size = sum(len(key) + len(value.encode()) for key, value in job.fields().items())
            if size > contract.MAX_MESSAGE_BYTES:
                # The updater drops a job this large: refuse the subscribe (or listen)
                # now rather than acknowledge it and never update. What a client chooses
                # is cut (services/mcp_lab/untrusted.py), so this is a guard, not a path a
                # client takes.
                logger.warning(
                    "[lab] job of %d bytes for session %s refused", size, peer.session[:64]
                )
                raise MCPError(
                    code=mcp_types.INVALID_PARAMS,
                    message=f"update job of {size} bytes is over {contract.MAX_MESSAGE_BYTES}",
                )

        def add(pipe: Any) -> int:
            return state.subscribe_in(pipe, uri, peer.session, self.replica, jobs)

        try:
            replies = await self.writer.submit(add)
        except (RedisError, OSError) as exc:
            raise redis_failed(exc) from exc
        return ",".join(str(job_id) for job_id in replies[-len(jobs) :])

    async def forget_subscription(self, peer: Peer, uri: str) -> None:
        """Drop ``peer``'s subscription from Redis unless another stream of it here
        remains (one submit to the batch writer, as a subscribe is)."""
        if self.registry.subscribers(uri, peer.session):
            return
        disown = not self._holds_any(peer)

        def forget(pipe: Any) -> int:
            replica = self.replica if disown else None
            return state.forget_subscriber_in(pipe, [peer.session], [uri], replica=replica)

        try:
            await self.writer.submit(forget)
        except (RedisError, OSError) as exc:
            logger.warning("[lab] could not drop subscriber %s: %s", peer.session, exc)

    def _holds_any(self, peer: Peer) -> bool:
        """Whether this replica still holds a subscription of ``peer``'s session."""
        return any(s.peer.session == peer.session for s in self.registry.all_subscribers())

    def clean_up_later(
        self, peer: Peer, uris: set[str], *, idle: bool = False, touched: set[str] | None = None
    ) -> None:
        """Drop an ended session's subscriptions, kept events and (in session scope) its
        states of ``touched`` (every URI it subscribed to) from Redis, in a task of its
        own (awaited at shutdown), then log (and, when the server ended it for
        idleness, record) the session's end."""
        owned = touched if self.settings.state_scope != contract.SHARED_SCOPE else None
        task = asyncio.create_task(
            self._clean_up(peer, uris, idle, owned or set()), name=f"end {peer.session}"
        )
        self.cleanups.add(task)
        task.add_done_callback(self.cleanups.discard)

    async def _clean_up(self, peer: Peer, uris: set[str], idle: bool, states: set[str]) -> None:
        dropped = [u for u in sorted(uris) if not self.registry.subscribers(u, peer.session)]
        disown = bool(dropped) and not self._holds_any(peer)
        forget_events = peer.on_streamable_http and self.settings.resumable
        forget_states = bool(states) or (
            bool(self.scenario.hidden) and self.settings.state_scope != contract.SHARED_SCOPE
        )

        def add(pipe: Any) -> int:
            replica = self.replica if disown else None
            added = state.forget_subscriber_in(
                pipe, [peer.session], dropped, replica=replica, kept_events=forget_events
            )
            if forget_states:
                added += state.forget_states_in(pipe, peer.session, states)
            return added

        if dropped or forget_events or forget_states:
            try:
                await self.writer.submit(add)
            except (RedisError, OSError) as exc:
                logger.warning(
                    "[lab] could not clean up session %s in Redis: %s", peer.session, exc
                )
        if idle:
            # The client left its session open (no DELETE); the server closed it.
            seconds = self.settings.session_idle_seconds
            why = f"idle for {seconds:g} s"
            event(protocol.SESSION_END, why, peer, f"subscriptions={len(uris)}")
            await self.recorder.ended(peer, contract.REASON_IDLE)
        else:
            event(protocol.SESSION_END, "closed", peer, f"subscriptions={len(uris)}")

    async def listen_closed(self, peer: Peer) -> None:
        """A 2026-07-28 client closed a listen stream that named resources: its way to
        unsubscribe (recorded)."""
        await self.recorder.stream(peer, "in", protocol.LISTEN_CLOSED)

    async def deleted(self, peer: Peer) -> None:
        """The client ended its session itself (HTTP DELETE): logged and recorded."""
        event(protocol.SESSION_DELETE, "by the client", peer)
        await self.recorder.stream(peer, "in", protocol.SESSION_DELETE)

    async def died_with_replica(self, sessions: dict[str, list[str]]) -> None:
        """Record the end of sessions whose server replica died (``sessions``: each one's
        subscribed URIs): a ``session/end`` with reason ``replica-gone`` per URI, with
        the version its state has now, so an update applied but never delivered
        shows in the report. Only the session id is known here (not its client): the
        report names the client from the session's earlier evidence. Their states (in
        session scope) are deleted then."""
        for session, uris in sessions.items():
            peer = Peer(session=session)
            held: list[str | None] = list(uris) or [None]
            for uri in held:
                version = None
                if uri is not None:
                    try:
                        async with self.health.bounded():
                            version = await state.read_version(self.redis, self.scope(peer), uri)
                    except (RedisError, OSError) as exc:
                        logger.warning("[lab] could not read the state of %s: %s", session, exc)
                gone = "its server replica is gone"
                event(protocol.SESSION_END, gone, peer, f"version={version}")
                await self.recorder.ended(peer, contract.REASON_REPLICA_GONE, uri, version)
        if not sessions or self.settings.state_scope == contract.SHARED_SCOPE:
            return

        def add(pipe: Any) -> int:  # their states go with them, read above
            return sum(state.forget_states_in(pipe, s, set(u)) for s, u in sessions.items())

        try:
            await self.writer.submit(add)
        except (RedisError, OSError) as exc:
            logger.warning(
                "[lab] could not delete the states of %d session(s): %s", len(sessions), exc
            )

    def event_store(self, session: str) -> RedisEventStore:
        """Where the SSE events sent to ``session`` are kept for resumption."""
        kind = GetStreamEvents if self.settings.post_responses == "json" else RedisEventStore
        return kind(
            self.redis,
            session,
            self.replica,
            max_events=self.settings.resume_max_events,
            ttl_seconds=self.settings.resume_ttl_seconds,
            on_replayed=self.replayed,
            writer=self.writer,
        )

    async def replayed(self, session: str, message: Any) -> None:
        """Log and record a notification written to a resumed stream."""
        if not isinstance(message, mcp_types.JSONRPCNotification):
            return
        peer = self.registry.peer(session) or Peer(
            session=session, transport=Transport.STREAMABLE_HTTP
        )
        uri = (message.params or {}).get("uri")
        uri = uri if isinstance(uri, str) else None
        event("notification/resume", f"{message.method} uri={uri}" if uri else message.method, peer)
        await self.recorder.resumed(peer, message.method, uri)

    async def hidden_from(self, peer: Peer) -> frozenset[str]:
        """The scenario's hidden resources not yet listed for ``peer``'s scope (none
        read from Redis when the scenario hides nothing)."""
        if not self.scenario.hidden:
            return frozenset()
        try:
            async with self.health.bounded():
                listed = await state.listed(self.redis, self.scope(peer))
            return self.scenario.hidden - listed
        except (RedisError, OSError) as exc:
            raise redis_failed(exc) from exc

    async def listed_now(self, peer: Peer) -> set[str] | None:
        """The scenario's hidden resources listed for ``peer``'s scope so far, for
        :attr:`Subscriber.told_listed` (None: the scenario hides nothing, or Redis
        failed; a list_changed the relay misses is then not sent late)."""
        if not self.scenario.hidden:
            return None
        try:
            async with self.health.bounded():
                listed = await state.listed(self.redis, self.scope(peer))
            return set(self.scenario.hidden & listed)
        except (RedisError, OSError) as exc:
            logger.warning("[lab] could not read the listed resources: %r", exc)
            return None

    async def read(self, peer: Peer, uri: str, batched: bool = False) -> tuple[int, str]:
        """Version and text of ``uri`` for ``peer``'s state scope; ``batched``: in the
        batch writer's next pipeline (a subscribe burst waits there, not for the pool)."""
        try:
            initial = self.catalog[uri].initial(self.settings.initial_status)
            batch = self.writer.submit if batched else None
            async with self.health.bounded():
                return await state.read_state(
                    self.redis, self.scope(peer), uri, initial, batch=batch
                )
        except (RedisError, OSError) as exc:
            raise redis_failed(exc) from exc


class GetStreamEvents(RedisEventStore):
    """The event store with ``MCP_TEST_POST_RESPONSES=json``: a POST's response is
    one JSON body, without an event id, so it can never be resumed; only the GET
    stream's events are kept."""

    async def store_event(self, stream_id: str, message: Any) -> str:
        if stream_id != GET_STREAM_KEY:
            return ""
        return await super().store_event(stream_id, message)
