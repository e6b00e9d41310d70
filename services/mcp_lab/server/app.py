"""The MCP server's assembly: ``build_lab`` puts the lab's FastMCP server together
(its resources, handlers, event log, relay and the background tasks of its lifespan);
``http_app`` puts the HTTP app around it (Streamable HTTP, legacy SSE, the dashboard,
behind the lab's one ASGI layer). Running it is :mod:`mcp_lab.server.run`; what the
handlers share is :mod:`mcp_lab.server.service`; the handlers are
:mod:`mcp_lab.server.handlers`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import mcp_types
from fastmcp import FastMCP
from fastmcp.server.http import create_sse_app
from fastmcp.server.lifespan import lifespan
from redis.exceptions import RedisError
from starlette.routing import Mount

from mcp_lab import contract, protocol, state, state_jobs
from mcp_lab.catalog import SERVER_INSTRUCTIONS, Catalog
from mcp_lab.evidence import trim
from mcp_lab.evidence.labels import SessionLabels
from mcp_lab.evidence.recorder import Recorder
from mcp_lab.scenarios import registry as scenarios
from mcp_lab.server import dashboard, lifecycle, mcp_adapter
from mcp_lab.server.asgi import FrontDoor, normal_path
from mcp_lab.server.dashboard_feed import DashboardFeed
from mcp_lab.server.exports import Matrix
from mcp_lab.server.handlers import EventLogMiddleware, Handlers
from mcp_lab.server.inflight import InFlightIds
from mcp_lab.server.listen import ListenStreams
from mcp_lab.server.listen_drop import ListenDrops
from mcp_lab.server.relay import Relay
from mcp_lab.server.resume.get_streams import ServeGet, StreamLog, plain
from mcp_lab.server.resume.middleware import Resume, heartbeat, new_replica_id
from mcp_lab.server.service import Lab, bounded_error_data
from mcp_lab.server.sessions import SessionRegistry
from mcp_lab.server.store_health import GuardedWriter, HealthPing, StoreHealth, quiet_store_errors
from mcp_lab.server.unadvertised import EMPTY_LISTS, answer_with_empty_lists
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.server")

# Served by FastMCP out of the box but not implemented by the lab: withdrawn so
# the initialize result advertises only what the lab really does.
_UNIMPLEMENTED = (protocol.PROMPTS_LIST, "prompts/get", "logging/setLevel", "completion/complete")
_TOOL_METHODS = (protocol.TOOLS_LIST, protocol.TOOLS_CALL)
# How long shutdown waits for the background tasks to stop once cancelled.
_STOP_SECONDS = 5
# How long shutdown waits for the Redis clean-ups of sessions that just ended.
_CLEANUP_SECONDS = 10


def build_lab(
    settings: LabSettings, catalog: Catalog | None = None, matrix: Matrix | None = None
) -> tuple[FastMCP, Lab]:
    """The FastMCP server of the lab, playing ``settings.scenario`` (serving its
    catalog, or ``catalog`` when given), and the state its handlers share; the
    dashboard's ``/api/matrix`` reads ``matrix`` (none: 404)."""
    scenario = scenarios.get(settings.scenario)
    catalog = scenario.catalog if catalog is None else catalog
    redis = state.connect(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        pool_timeout=settings.redis_pool_timeout_seconds,
    )
    registry = SessionRegistry()
    replica = new_replica_id()
    # Whether Redis answers: every request's Redis work is bounded by it.
    health = StoreHealth(settings.redis_url, replica)
    # One task writes evidence and resume events in batches (see mcp_lab.process.writer).
    writer = GuardedWriter(redis, health, max_queue=settings.write_queue_max)
    recorder = Recorder(redis, settings.events_max, writer)
    health.count_lost(lambda: recorder.lost)
    relay = Relay(settings, redis, registry, recorder, catalog, replica)
    lab = Lab(
        settings,
        redis,
        registry,
        recorder,
        relay,
        replica,
        catalog,
        writer,
        scenario,
        health=health,
    )
    quiet_store_errors()
    labels = SessionLabels()
    feed = DashboardFeed(
        settings.redis_url,
        recorder,
        block_ms=settings.dashboard_block_ms,
        max_streams=settings.dashboard_max_streams,
        max_events=settings.dashboard_max_events,
        labels=labels,
    )

    @lifespan
    async def run_relay(server: FastMCP) -> AsyncIterator[dict[str, Any]]:
        try:
            await state_jobs.ensure_job_group(redis)
            # What `mcp-lab report` scores by default: the scenario the lab plays.
            await redis.set(contract.SCENARIO_KEY, settings.scenario)
            await redis.set(contract.STATE_SCOPE_KEY, settings.state_scope)
            await labels.share(redis)
        except (RedisError, OSError) as exc:
            logger.warning("[lab] redis unavailable at start (%s); will keep retrying", exc)
        writer.start()
        tasks = [
            asyncio.create_task(health.run(), name="store-health"),
            asyncio.create_task(lab.relay.run(), name="relay"),
            asyncio.create_task(
                heartbeat(redis, lab.replica, settings.replica_heartbeat_seconds),
                name="heartbeat",
            ),
            asyncio.create_task(
                lifecycle.sweep_forever(
                    redis, lab.replica, catalog.uris(), on_dropped=lab.died_with_replica
                ),
                name="sweep",
            ),
            asyncio.create_task(trim.keep_under(redis, settings.events_max_bytes), name="trim"),
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
            await feed.close()
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
    server.add_middleware(EventLogMiddleware(lab, labels))
    # ttlMs and cacheScope of every cacheable 2026-07-28 result: the scenario's (0 and
    # "private" by default: no client caches a read).
    mcp_adapter.set_cache_hints(server, scenario.cache_ttl_ms, scenario.cache_scope)

    handlers = Handlers(lab)
    for spec in catalog:
        server.resource(
            spec.uri, name=spec.name, description=spec.description, mime_type=spec.mime_type
        )(handlers.reader(spec))
    for template in catalog.templates:
        server.resource(
            template.uri_template,
            name=template.name,
            description=template.description,
            mime_type=template.mime_type,
        )(handlers.template_reader(template))
    if settings.enable_tool:
        server.tool(name="get_review_status", description="Current text of test://review/status.")(
            handlers.get_review_status
        )
    mcp_adapter.register_request_handler(
        server, protocol.SUBSCRIBE, mcp_types.SubscribeRequestParams, handlers.subscribe
    )
    mcp_adapter.register_request_handler(
        server, protocol.UNSUBSCRIBE, mcp_types.UnsubscribeRequestParams, handlers.unsubscribe
    )
    listen = ListenStreams(
        registry,
        peer_of=lambda ctx: lab.peer_of_request(ctx, None),
        subscribe=lab.subscribe,
        on_end=lab.forget_subscription,
        catalog=catalog,
        on_closed=lab.listen_closed,
        closing=lab.closing,
        close=scenario.listen_close,
        unacknowledged=scenario.unacknowledged,
        on_unacknowledged=lambda peer, uri: recorder.lab_did(
            peer, protocol.LISTEN_UNACKNOWLEDGED, uri
        ),
        drops=None
        if scenario.listen_drop is None
        else ListenDrops(
            redis,
            scenario.listen_drop,
            record=lambda peer: recorder.lab_did(peer, protocol.LISTEN_DROPPED),
            tell=lab.relay.tell,
            forget=lab.forget_subscription,
        ),
    )
    mcp_adapter.register_request_handler(
        server, protocol.LISTEN, mcp_types.SubscriptionsListenRequestParams, listen
    )
    withdrawn = _UNIMPLEMENTED if settings.enable_tool else _UNIMPLEMENTED + _TOOL_METHODS
    mcp_adapter.withdraw_request_handlers(server, withdrawn)
    if not settings.strict_methods:
        lists = [m for m in EMPTY_LISTS if m in withdrawn]
        answer_with_empty_lists(server, lists, lambda ctx: lab.peer_of_request(ctx, None))
    mcp_adapter.add_inbound_middleware(server, bounded_error_data)
    mcp_adapter.add_inbound_middleware(server, recorder.middleware(lab.peer_of_request))
    dashboard.add_routes(
        server,
        HealthPing(redis, health),  # /healthz: the probe's finding, at once
        lab.relay,
        registry,
        recorder,
        lab.http_sessions,
        settings.max_sessions,
        feed,
        settings.auth_token,
        lab.long_lived,
        matrix,
    )

    return server, lab


def http_app(
    settings: LabSettings, catalog: Catalog | None = None, matrix: Matrix | None = None
) -> tuple[FrontDoor, Lab]:
    """One ASGI app: Streamable HTTP at ``settings.path`` (both protocol
    generations), legacy SSE at ``settings.sse_path``, the dashboard routes (its
    matrix read by ``matrix``), behind the lab's one ASGI layer
    (:mod:`mcp_lab.server.asgi`; ``guard`` adds the security checks to it)."""
    server, lab = build_lab(settings, catalog, matrix)
    app = server.http_app(
        path=settings.path,
        transport="http",
        retry_interval=settings.retry_ms if settings.resumable else None,
        session_idle_timeout=settings.session_idle_seconds,
        json_response=settings.post_responses == "json",
    )
    cap = lifecycle.SessionCap(
        app,
        max_sessions=settings.max_sessions,
        retry_after=lifecycle.retry_after_seconds(settings.session_idle_seconds),
        http_sessions=lab.http_sessions.open,
        others=lab.long_lived,
    )
    lab.http_sessions.bind(app, settings.max_sessions, lifecycle.note_refused, lab.long_lived)
    if settings.sse_path:
        sse = create_sse_app(
            server=server,
            sse_path=settings.sse_path,
            message_path=f"{settings.sse_path.rstrip('/')}/messages/",
        )
        # Last, so /mcp and the dashboard routes match first. Its lifespan is not
        # run by Starlette; FastMCP's own lifespan (the relay) runs once, above.
        app.router.routes.append(Mount("/", app=sse))
    if settings.post_responses == "auto":
        mcp_adapter.answer_posts_as_json(app, protocol.ANSWERED_AS_JSON.__contains__)
    mcp_adapter.write_get_streams(app, lab.closing)
    serve_get: ServeGet = plain(app)
    if settings.resumable:
        mcp_adapter.bind_session_event_stores(app, lab.event_store, lab.protocol_of)
        serve_get = Resume(
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
        streams=StreamLog(serve_get, lab.registry, lab.recorder.stream),
        cap=cap,
        sse_path=normal_path(settings.sse_path) if settings.sse_path else None,
        deletes=lifecycle.DeleteLog(app, lab.registry.peer, lab.deleted),
        in_flight=InFlightIds(settings.max_requests_at_once),
    )
    return front, lab
