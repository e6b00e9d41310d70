"""Running the server: ``mcp-lab server`` over HTTP (uvicorn) or stdio."""

from __future__ import annotations

import asyncio
import logging
import socket

import anyio
import uvicorn
from redis.exceptions import RedisError

from mcp_lab import state, untrusted
from mcp_lab.evidence import reader
from mcp_lab.logs import setup_logging
from mcp_lab.process import heap
from mcp_lab.server import connections, hangup, lifecycle, mcp_adapter, peers
from mcp_lab.server.app import build_lab, http_app
from mcp_lab.server.asgi import guard
from mcp_lab.server.exports import Matrix
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.server")

# How long start-up waits for the relay before it says "ready" anyway.
_RELAY_START_SECONDS = 5
# How long start-up tries to record the scenario it plays before it goes on without.
_SCENARIO_SECONDS = 5


class StartupFailed(Exception):
    """The HTTP server could not start (uvicorn has logged why)."""


class _Server(uvicorn.Server):
    """uvicorn's server, which sets ``closing`` as it starts to shut down: the GET
    streams the lab writes end then, and uvicorn need not wait out its graceful
    timeout for them (sse-starlette's streams watch uvicorn's signal handler for
    the same)."""

    def __init__(self, config: uvicorn.Config, closing: asyncio.Event) -> None:
        super().__init__(config)
        self._closing = closing

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._closing.set()
        await super().shutdown(sockets)


async def _serve(http: uvicorn.Server) -> None:
    """uvicorn's ``serve``, with its start-up failure (it calls ``sys.exit``, which
    would escape the event loop with a traceback) turned into :class:`StartupFailed`."""
    try:
        await http.serve()
    except SystemExit as exc:
        raise StartupFailed(f"uvicorn exit code {exc.code}") from None


async def play_scenario(settings: LabSettings) -> None:
    """Record the scenario this server plays (``mcp:scenario``); when the current
    observation run was played under another one, a new run begins, so that a run
    is scored in the scenario it was played under (reader.play_scenario). Without
    Redis the server starts anyway (the lifespan says Redis is unavailable)."""
    redis = state.connect(settings.redis_url, reconnect=False)
    try:
        began = await asyncio.wait_for(
            reader.play_scenario(redis, settings.scenario), _SCENARIO_SECONDS
        )
    except (RedisError, OSError, TimeoutError) as exc:
        logger.warning("[evidence] could not record the scenario played (%s)", exc or "timeout")
        return
    finally:
        await redis.aclose()
    if began is not None:
        run_id, before = began
        logger.info(
            "[evidence] new observation run %s: the lab now plays %s (the last run played %s)",
            run_id,
            settings.scenario,
            untrusted.shown(before, 60),  # read from a run entry anyone may write
        )


async def run_http(settings: LabSettings, matrix: Matrix | None = None) -> None:
    """Serve the lab over HTTP until cancelled or interrupted (the dashboard's matrix
    read by ``matrix``)."""
    await play_scenario(settings)
    app, lab = http_app(settings, matrix=matrix)
    heap.tune()
    short = lifecycle.open_files_for(settings.max_sessions)
    if short:
        logger.warning("[lab] %s", short)
    cap, fewer = connections.connection_cap(settings)
    if fewer:
        logger.warning("[lab] %s", fewer)
    connections.log_accept_errors_once_a_second(asyncio.get_running_loop())
    config = uvicorn.Config(
        guard(app, settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        log_config=None,  # its lines go to the lab's log handler (mcp_lab.logs)
        lifespan="on",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=settings.keep_alive_seconds,
        http=connections.protocol_class(
            connections.ConnectionGuard(cap, settings.head_timeout_seconds)
        ),
    )
    http = _Server(config, lab.closing)
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
    await play_scenario(settings)
    server, _ = build_lab(settings)
    logger.info("[lab] server ready transport=stdio scope=%s", settings.state_scope)
    with peers.serving_stdio(), hangup.hang_up_point() as asked:
        async with anyio.create_task_group() as tasks:

            async def serve() -> None:
                # Both eras on the one connection (a probe, then initialize):
                # mcp_adapter.stdio_eras.
                await mcp_adapter.serve_stdio(server)
                tasks.cancel_scope.cancel()

            tasks.start_soon(serve)
            await asked.wait()  # the lab hangs up (hangup.hang_up): the connection ends
            if mcp_adapter.end_stdio_wire():
                logger.info("[lab] hung up: the stdio connection ends here (stdout closed)")
            else:
                logger.warning("[lab] hung up, but stdout could not be closed: serving stops")
            tasks.cancel_scope.cancel()


def no_fastmcp_spans() -> None:
    """FastMCP's own OpenTelemetry spans left out (its ``telemetry_mode`` set to
    ``propagation_only``), unless ``FASTMCP_TELEMETRY_MODE`` (or FastMCP's ``.env``)
    chose a mode. The lab exports no traces, yet in FastMCP's default mode every
    request builds its span attributes (protocol, auth, session, component) for a
    span that records nothing: 6% of the instructions of a ``resources/read``
    (docs/dev/performance-notebook.md, "Where a read's time goes"). Trace context in ``_meta`` is
    still propagated."""
    import fastmcp

    if "telemetry_mode" not in fastmcp.settings.model_fields_set:
        fastmcp.settings.telemetry_mode = "propagation_only"


def main(settings: LabSettings, transport: str = "http", matrix: Matrix | None = None) -> None:
    """Entry point of ``mcp-lab server`` (over HTTP, its dashboard's matrix read by
    ``matrix``)."""
    setup_logging(settings.log_level)
    no_fastmcp_spans()
    for unchecked in mcp_adapter.unchecked_versions():
        logger.warning("[lab] %s: the SDK adapter was not checked against it", unchecked)
    try:
        asyncio.run(run_stdio(settings) if transport == "stdio" else run_http(settings, matrix))
    except KeyboardInterrupt:
        pass
    except StartupFailed:
        logger.error(
            "[lab] could not listen on %s:%d (in use by another process? set MCP_TEST_PORT)",
            settings.host,
            settings.port,
        )
        raise SystemExit(3) from None
