"""The MCP server: one subscribable resource whose state lives in Redis.

``build_lab`` assembles a FastMCP server with the resource, the subscribe and
unsubscribe handlers, the event log and the relay. ``run_http`` serves it over
Streamable HTTP with uvicorn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.server.dependencies import get_context
from fastmcp.server.http import create_sse_app
from fastmcp.server.lifespan import lifespan
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http import GET_STREAM_KEY
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.routing import Mount

from services import contract, heap, state
from services.catalog import (
    LAB_CATALOG,
    REVIEW_STATUS,
    SERVER_INSTRUCTIONS,
    Catalog,
    ResourceSpec,
)
from services.contract import Transport
from services.evidence.recorder import Recorder, annotate
from services.logs import event, setup_logging
from services.server import dashboard, lifecycle, mcp_adapter
from services.server.asgi import FrontDoor, normal_path
from services.server.guard import guard
from services.server.listen import ListenStreams
from services.server.peers import Peer, make_peer
from services.server.relay import Relay
from services.server.resume import eventstore
from services.server.resume.eventstore import RedisEventStore
from services.server.resume.get_streams import GetStream, StreamLog, plain
from services.server.resume.middleware import Resume, heartbeat, new_replica_id
from services.server.sessions import SessionRegistry, Subscriber
from services.server.unadvertised import EMPTY_LISTS, answer_with_empty_lists
from services.settings import LabSettings
from services.writer import BatchWriter

logger = logging.getLogger("mcp_lab.server")

# MCP's "resource not found" (2025-11-25 and before); the JSON-RPC codes come from mcp_types.
RESOURCE_NOT_FOUND = -32002

# Served by FastMCP out of the box but not implemented by the lab: withdrawn so
# the initialize result advertises only what the lab really does.
_UNIMPLEMENTED = ("prompts/list", "prompts/get", "logging/setLevel", "completion/complete")
_TOOL_METHODS = ("tools/list", "tools/call")
# How long shutdown waits for the background tasks to stop once cancelled.
_STOP_SECONDS = 5
# How long start-up waits for the relay before it says "ready" anyway.
_RELAY_START_SECONDS = 5
# How long shutdown waits for the Redis clean-ups of sessions that just ended.
_CLEANUP_SECONDS = 10


def not_found(uri: str, protocol_version: str) -> MCPError:
    """The "unknown resource" error of the negotiated protocol generation."""
    code = (
        mcp_types.INVALID_PARAMS
        if protocol_version in MODERN_PROTOCOL_VERSIONS
        else RESOURCE_NOT_FOUND
    )
    return MCPError(code=code, message="Resource not found", data={"uri": uri})


def redis_failed(exc: Exception) -> MCPError:
    """The error a client gets while Redis cannot be reached."""
    logger.error("[lab] redis unavailable: %s", exc)
    return MCPError(
        code=mcp_types.INTERNAL_ERROR, message=f"Lab state store (Redis) unavailable: {exc}"
    )


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
    http_sessions: mcp_adapter.HttpSessions = field(default_factory=mcp_adapter.HttpSessions)
    # Redis clean-ups of ended sessions still running (see clean_up_later).
    cleanups: set[asyncio.Task[None]] = field(default_factory=set)

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
        if ctx.method == "initialize" and isinstance(ctx.params, dict):
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
        refused "No connection available." past it."""
        registered = self.registry.subscribe(subscriber, uri)
        try:
            registered.known[uri] = (await self.read(subscriber.peer, uri, batched=True))[0]
            return await self._schedule_update(subscriber.peer, uri)
        except MCPError:
            self.registry.unsubscribe(registered.key, uri)
            raise

    async def _schedule_update(self, peer: Peer, uri: str) -> str:
        """Record ``peer`` as subscribed to ``uri`` and queue its update (one submit to
        the batch writer, its commands in this order); the job id."""
        job = contract.UpdateJob(uri=uri, target=self.scope(peer))

        def add(pipe: Any) -> int:
            return state.subscribe_in(pipe, uri, peer.session, self.replica, job)

        try:
            *_, job_id = await self.writer.submit(add)
        except (RedisError, OSError) as exc:
            raise redis_failed(exc) from exc
        return str(job_id)

    async def forget_subscription(self, peer: Peer, uri: str) -> None:
        """Drop ``peer``'s subscription from Redis unless another stream of it here remains."""
        if self.registry.subscribers(uri, peer.session):
            return
        try:
            await state.remove_subscriber(self.redis, uri, peer.session)
            if not any(s.peer.session == peer.session for s in self.registry.all_subscribers()):
                await lifecycle.disown_subscriber(self.redis, self.replica, peer.session)
        except (RedisError, OSError) as exc:
            logger.warning("[lab] could not drop subscriber %s: %s", peer.session, exc)

    def clean_up_later(self, peer: Peer, uris: set[str], *, idle: bool = False) -> None:
        """Drop an ended session's subscriptions and kept events from Redis, in a
        task of its own (awaited at shutdown), then log (and, when the server ended
        it for idleness, record) the session's end."""
        task = asyncio.create_task(self._clean_up(peer, uris, idle), name=f"end {peer.session}")
        self.cleanups.add(task)
        task.add_done_callback(self.cleanups.discard)

    async def _clean_up(self, peer: Peer, uris: set[str], idle: bool) -> None:
        dropped = [u for u in sorted(uris) if not self.registry.subscribers(u, peer.session)]
        disown = bool(dropped) and not any(
            s.peer.session == peer.session for s in self.registry.all_subscribers()
        )
        forget_events = peer.on_streamable_http and self.settings.resumable

        def add(pipe: Any) -> int:
            for uri in dropped:
                pipe.srem(contract.subscribers_key(uri), peer.session)
            if disown:
                pipe.srem(contract.replica_sessions_key(self.replica), peer.session)
            if forget_events:
                eventstore.forget_session_in(pipe, peer.session)
            return len(dropped) + int(disown) + int(forget_events)

        if dropped or forget_events:
            try:
                await self.writer.submit(add)
            except (RedisError, OSError) as exc:
                logger.warning(
                    "[lab] could not clean up session %s in Redis: %s", peer.session, exc
                )
        if idle:
            # The client left its session open (no DELETE); the server closed it.
            seconds = self.settings.session_idle_seconds
            event("session/end", f"idle for {seconds:g} s", peer, f"subscriptions={len(uris)}")
            await self.recorder.ended(peer, contract.REASON_IDLE)
        else:
            event("session/end", "closed", peer, f"subscriptions={len(uris)}")

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

    async def read(self, peer: Peer, uri: str, batched: bool = False) -> tuple[int, str]:
        """Version and text of ``uri`` for ``peer``'s state scope; ``batched``: in the
        batch writer's next pipeline (a subscribe burst waits there, not for the pool)."""
        try:
            initial = self.catalog[uri].initial(self.settings.initial_status)
            batch = self.writer.submit if batched else None
            return await state.read_state(self.redis, self.scope(peer), uri, initial, batch=batch)
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


class EventLogMiddleware(Middleware):
    """Logs initialize and list, and answers unknown URIs on read.

    FastMCP's base ``__call__`` builds a chain of three or four wrapper closures
    (``on_message``, ``on_request``, the method's hook) for every message; this one
    calls the method's hook directly and passes every other message straight on.
    """

    def __init__(self, lab: Lab) -> None:
        self._lab = lab
        self._hooks: dict[str, Any] = {
            "initialize": self.on_initialize,
            "server/discover": self.on_discover,
            "resources/list": self.on_list_resources,
            "resources/read": self.on_read_resource,
        }

    async def __call__(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        hook = self._hooks.get(context.method or "")
        if hook is None or not mcp_adapter.typed_hooks_run_now():
            return await call_next(context)
        return await hook(context, call_next)

    async def on_initialize(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        result = await call_next(context)
        ctx = context.fastmcp_context
        if ctx is not None:
            params = getattr(context.message, "params", None)
            peer = self._lab.peer(ctx, params)
            self._lab.registry.remember(peer)
            mcp_adapter.on_session_end(ctx.session, lambda: self._end_session(peer))
            event(
                "initialize",
                "client connected",
                peer,
                f"protocol={peer.protocol} transport={peer.transport}",
            )
        return result

    async def on_discover(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        if context.fastmcp_context is not None:
            peer = self._lab.peer(context.fastmcp_context)
            event(
                "server/discover",
                "client connected",
                peer,
                f"protocol={peer.protocol} transport={peer.transport}",
            )
        return await call_next(context)

    async def on_list_resources(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        if context.fastmcp_context is not None:
            event("resources/list", "requested", self._lab.peer(context.fastmcp_context))
        return await call_next(context)

    async def on_read_resource(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        uri = str(context.message.uri)
        ctx = context.fastmcp_context
        if uri not in self._lab.catalog and ctx is not None:
            event("resources/read", f"uri={uri}", self._lab.peer(ctx), "error=not-found")
            raise not_found(uri, ctx.session.protocol_version)
        return await call_next(context)

    async def _end_session(self, peer: Peer) -> None:
        idle = self._lab.http_sessions.expired_idle(peer.session)
        registry = self._lab.registry
        uris = registry.drop(peer.session)
        registry.forget(peer.session)
        # The SDK gives this callback 5 s and then abandons it; in a burst of session
        # ends the Redis clean-up waits its turn longer than that, so it runs apart.
        self._lab.clean_up_later(peer, uris, idle=idle)


def build_lab(settings: LabSettings, catalog: Catalog = LAB_CATALOG) -> tuple[FastMCP, Lab]:
    """The FastMCP server of the lab, serving ``catalog``, and the state its handlers share."""
    redis = state.connect(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        pool_timeout=settings.redis_pool_timeout_seconds,
    )
    registry = SessionRegistry()
    # One task writes evidence and resume events in batches (see services.writer).
    writer = BatchWriter(redis, max_queue=settings.write_queue_max)
    recorder = Recorder(redis, settings.events_max, writer)
    relay = Relay(settings, redis, registry, recorder, catalog)
    lab = Lab(settings, redis, registry, recorder, relay, new_replica_id(), catalog, writer)

    @lifespan
    async def run_relay(server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        try:
            await state.ensure_job_group(redis)
        except (RedisError, OSError) as exc:
            logger.warning("[lab] redis unavailable at start (%s); will keep retrying", exc)
        writer.start()
        tasks = [
            asyncio.create_task(lab.relay.run(), name="relay"),
            asyncio.create_task(
                heartbeat(redis, lab.replica, settings.replica_heartbeat_seconds),
                name="heartbeat",
            ),
            asyncio.create_task(
                lifecycle.sweep_forever(redis, lab.replica, catalog.uris()), name="sweep"
            ),
        ]
        try:
            yield {}
        finally:
            for task in tasks:
                task.cancel()
            _, stuck = await asyncio.wait(tasks, timeout=_STOP_SECONDS)
            for task in stuck:  # never expected: each loop checks for its cancellation
                logger.error(
                    "[lab] task %s did not stop within %ss", task.get_name(), _STOP_SECONDS
                )
            await lab.relay.close()
            if lab.cleanups:  # ended sessions' Redis clean-ups, bounded
                await asyncio.wait(set(lab.cleanups), timeout=_CLEANUP_SECONDS)
            await writer.close()  # flushes what is queued
            if not await recorder.save_lost():
                logger.warning(
                    "[evidence] %d lost event(s) could not be counted in Redis",
                    recorder.unsaved_lost,
                )
            await redis.aclose()

    from importlib.metadata import PackageNotFoundError, version

    try:  # serverInfo names the lab and its version, not the framework's
        lab_version = version("mcp-subscribe-lab")
    except PackageNotFoundError:  # a source tree that was never installed
        lab_version = "unknown"
    server = FastMCP(
        "mcp-subscribe-lab",
        version=lab_version,
        instructions=SERVER_INSTRUCTIONS,
        lifespan=run_relay,
        # Its only middleware rewrites $ref in tool and template schemas; the lab's
        # have none, and it would run on every message.
        dereference_schemas=False,
    )
    server.add_middleware(EventLogMiddleware(lab))

    for spec in catalog:
        _add_resource(server, lab, spec)

    if settings.enable_tool:

        @server.tool(name="get_review_status", description="Current text of test://review/status.")
        async def get_review_status(ctx: Context) -> str:
            peer = lab.peer(ctx)
            version, text = await lab.read(peer, REVIEW_STATUS.uri)
            event("tools/call", f"get_review_status version={version}", peer)
            return text

    async def subscribe(_: Any, params: mcp_types.SubscribeRequestParams) -> mcp_types.EmptyResult:
        ctx = get_context()
        peer = lab.peer(ctx)
        uri = str(params.uri)
        if uri not in catalog:
            event("resources/subscribe", f"uri={uri}", peer, "error=not-found")
            raise not_found(uri, peer.protocol)
        session = ctx.session
        subscriber = Subscriber(
            peer=peer,
            send_updated=session.send_resource_updated,
            send_list_changed=session.send_resource_list_changed,
            always_open=not peer.on_streamable_http,
            get_stream=mcp_adapter.get_stream_of(lab.http_sessions, session),
        )
        job_id = await lab.subscribe(subscriber, uri)
        event("resources/subscribe", f"uri={uri}", peer, f"job={job_id}")
        return mcp_types.EmptyResult()

    async def unsubscribe(
        _: Any, params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        peer = lab.peer(get_context())
        uri = str(params.uri)
        if uri not in catalog:
            event("resources/unsubscribe", f"uri={uri}", peer, "error=not-found")
            raise not_found(uri, peer.protocol)
        was_subscribed = registry.unsubscribe(peer.session, uri)
        await lab.forget_subscription(peer, uri)
        event("resources/unsubscribe", f"uri={uri}", peer, f"was_subscribed={was_subscribed}")
        return mcp_types.EmptyResult()

    mcp_adapter.register_request_handler(
        server, "resources/subscribe", mcp_types.SubscribeRequestParams, subscribe
    )
    mcp_adapter.register_request_handler(
        server, "resources/unsubscribe", mcp_types.UnsubscribeRequestParams, unsubscribe
    )
    listen = ListenStreams(
        registry,
        peer_of=lambda ctx: lab.peer_of_request(ctx, None),
        subscribe=lab.subscribe,
        on_end=lab.forget_subscription,
        catalog=catalog,
    )
    mcp_adapter.register_request_handler(
        server, "subscriptions/listen", mcp_types.SubscriptionsListenRequestParams, listen
    )
    withdrawn = _UNIMPLEMENTED if settings.enable_tool else _UNIMPLEMENTED + _TOOL_METHODS
    mcp_adapter.withdraw_request_handlers(server, withdrawn)
    if not settings.strict_methods:
        lists = [m for m in EMPTY_LISTS if m in withdrawn]
        answer_with_empty_lists(server, lists, lambda ctx: lab.peer_of_request(ctx, None))
    mcp_adapter.add_inbound_middleware(server, recorder.middleware(lab.peer_of_request))
    dashboard.add_routes(
        server,
        redis,
        lab.relay,
        registry,
        recorder,
        lab.http_sessions,
        settings.max_sessions,
        settings.dashboard_block_ms,
    )

    return server, lab


def _add_resource(server: FastMCP, lab: Lab, spec: ResourceSpec) -> None:
    """Serve ``spec``: ``resources/read`` returns its text for the reader's scope."""

    async def read(ctx: Context) -> str:
        peer = lab.peer(ctx)
        version, text = await lab.read(peer, spec.uri)
        annotate(version=version)
        event("resources/read", f"uri={spec.uri} version={version}", peer)
        return text

    server.resource(
        spec.uri, name=spec.name, description=spec.description, mime_type=spec.mime_type
    )(read)


def http_app(settings: LabSettings, catalog: Catalog = LAB_CATALOG) -> tuple[FrontDoor, Lab]:
    """One ASGI app: Streamable HTTP at ``settings.path`` (both protocol
    generations), legacy SSE at ``settings.sse_path``, the dashboard routes, behind
    the lab's one ASGI layer (:mod:`services.server.asgi`; ``guard`` adds the
    security checks to it)."""
    server, lab = build_lab(settings, catalog)
    app = server.http_app(
        path=settings.path,
        transport="http",
        retry_interval=settings.retry_ms if settings.resumable else None,
        session_idle_timeout=settings.session_idle_seconds,
        json_response=settings.post_responses == "json",
    )
    lab.http_sessions.bind(app, settings.max_sessions, lifecycle.note_refused)
    if settings.sse_path:
        sse = create_sse_app(
            server=server,
            sse_path=settings.sse_path,
            message_path=f"{settings.sse_path.rstrip('/')}/messages/",
        )
        # Last, so /mcp and the dashboard routes match first. Its lifespan is not
        # run by Starlette; FastMCP's own lifespan (the relay) runs once, above.
        app.router.routes.append(Mount("/", app=sse))
    get_stream: GetStream = plain(app)
    if settings.resumable:
        mcp_adapter.bind_session_event_stores(app, lab.event_store, lab.protocol_of)
        get_stream = Resume(
            app,
            registry=lab.registry,
            redis=lab.redis,
            replica=lab.replica,
            retry_ms=settings.retry_ms,
            store_for=lab.event_store,
            on_replayed=lab.replayed,
            block_ms=settings.resume_block_ms,
        ).serve
    front = FrontDoor(
        app,
        path=normal_path(settings.path),
        # Sees every GET stream, resumed ones too (before Resume).
        streams=StreamLog(get_stream, lab.registry, lab.recorder.stream),
        cap=lifecycle.SessionCap(
            app,
            max_sessions=settings.max_sessions,
            retry_after=lifecycle.retry_after_seconds(settings.session_idle_seconds),
        ),
    )
    return front, lab


class StartupFailed(Exception):
    """The HTTP server could not start (uvicorn has logged why)."""


async def _serve(http: uvicorn.Server) -> None:
    """uvicorn's ``serve``, with its start-up failure (it calls ``sys.exit``, which
    would escape the event loop with a traceback) turned into :class:`StartupFailed`."""
    try:
        await http.serve()
    except SystemExit as exc:
        raise StartupFailed(f"uvicorn exit code {exc.code}") from None


async def run_http(settings: LabSettings) -> None:
    """Serve the lab over HTTP until cancelled or interrupted."""
    app, lab = http_app(settings)
    heap.tune()
    short = lifecycle.open_files_for(settings.max_sessions)
    if short:
        logger.warning("[lab] %s", short)
    config = uvicorn.Config(
        guard(app, settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        log_config=None,  # its lines go to the lab's log handler (services.logs)
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    http = uvicorn.Server(config)
    serving = asyncio.create_task(_serve(http), name="uvicorn")
    while not http.started and not serving.done():
        await asyncio.sleep(0.05)
    if http.started:
        try:
            await asyncio.wait_for(lab.relay.subscribed.wait(), timeout=_RELAY_START_SECONDS)
        except TimeoutError:
            logger.warning("[lab] relay not subscribed yet; serving anyway")
        sse = f" sse={settings.sse_url}" if settings.sse_path else ""
        logger.info(
            "[lab] server ready url=%s%s scope=%s relay=%s",
            settings.mcp_url,
            sse,
            settings.state_scope,
            lab.relay.state,
        )
    await serving


async def run_stdio(settings: LabSettings) -> None:
    """Serve one client over stdin/stdout; logs go to stderr, stdout carries only protocol."""
    server, _ = build_lab(settings)
    logger.info("[lab] server ready transport=stdio scope=%s", settings.state_scope)
    await server.run_async(transport=Transport.STDIO.value, show_banner=False)


def main(settings: LabSettings, transport: str = "http") -> None:
    """Entry point of ``mcp-lab server``."""
    setup_logging(settings.log_level)
    for unchecked in mcp_adapter.unchecked_versions():
        logger.warning("[lab] %s: the SDK adapter was not checked against it", unchecked)
    try:
        asyncio.run(run_stdio(settings) if transport == "stdio" else run_http(settings))
    except KeyboardInterrupt:
        pass
    except StartupFailed:
        logger.error(
            "[lab] could not listen on %s:%d (in use by another process? set MCP_TEST_PORT)",
            settings.host,
            settings.port,
        )
        raise SystemExit(3) from None
