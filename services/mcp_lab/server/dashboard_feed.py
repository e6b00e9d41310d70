"""The dashboard's data: built once per change, encoded once, sent to every viewer
without a copy per viewer.

One reader per server follows the evidence stream (on a Redis connection of its
own, not the request pool) while at least one dashboard stream is open. When
events arrive it has the report built once (at most every ``_MIN_BUILD_SECONDS``,
so a burst of events is one batch) and encoded once
(:mod:`mcp_lab.evidence.encoded`): one bytes object, the report's JSON framed as a
server-sent event. Every open stream sends that object; ``/api/report`` and the JSON
download send the JSON inside it (a view, not a copy, with its ``Content-Length``).

**Sent in slices.** uvicorn copies each body chunk it is given (its chunked
framing), and keeps what the client has not read yet in the connection's buffer:
handed the whole report, each viewer that reads slowly held a copy of it. Here each
response hands its connection ``SLICE_BYTES`` at a time, each once the connection
has taken the one before (uvicorn's flow control): a viewer holds at most a slice
or two in the server. A response still sending a report two builds older than the
newest is closed (its client reads too slowly; a browser reconnects, and is sent
the newest): so reports held by slow readers are at most two, however many read.
Closed at the socket: the stream aborts its connection
(:class:`mcp_lab.server.connections.Connection`, from its scope), which drops what
the client has not read, in the server and in the kernel (uvicorn's close waited
for the client to read it all: a client that never read held its socket, and up to
4 MB of kernel memory, as long as it stayed connected). It counts against
``MCP_TEST_DASHBOARD_MAX_STREAMS`` until its connection is gone. A viewer that
reads nothing at all, not even behind, is closed by the connections' write
deadline (:mod:`mcp_lab.server.connections`).

**Built beside the server.** A report of a long run is seconds of CPU, which on
the server's event loop stopped every request meanwhile: a run of more than
``local_events`` events (all runs' together) is built in the report worker
(:mod:`mcp_lab.evidence.worker`), a process of its own; a short one here. One build
at a time, shared by whoever asks meanwhile; the downloads (but the JSON) get a
build of their own, rendered where it is built.

The feed keeps the newest encoding only, and lets it go when the last stream closes
(responses still sending it hold it until they end). Each report reads at most
``MCP_TEST_DASHBOARD_MAX_EVENTS`` events, the newest of the run. At most
``MCP_TEST_DASHBOARD_MAX_STREAMS`` streams are open at once; past that a stream gets
503 with ``Retry-After``. What a report shows of sessions is their labels
(:mod:`mcp_lab.evidence.labels`), never their ids: under the lab's secret, read from
Redis at each build (so a server that could not take it at its start, or whose Redis
lost it, labels as every other view does).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Iterator

import anyio
from redis.exceptions import RedisError
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from mcp_lab import contract, sse, state
from mcp_lab.evidence import reader, worker
from mcp_lab.evidence.encoded import Encoded
from mcp_lab.evidence.labels import SessionLabels
from mcp_lab.evidence.recorder import Recorder
from mcp_lab.evidence.worker import Rendered, ReportWorker, WorkerFailed
from mcp_lab.logs import Throttled
from mcp_lab.server.connections import CONNECTION_EXTENSION, Connection

logger = logging.getLogger("mcp_lab.dashboard")

# Events arriving within this long of the last build wait for the next one (one batch).
_MIN_BUILD_SECONDS = 0.5
_RETRY_SECONDS = 2.0
_REFUSED_RETRY_AFTER = "10"
_REFUSAL_LOG_SECONDS = 10.0
# How much of a report one response hands its connection at a time.
SLICE_BYTES = 64 * 1024
# Runs of at most this many events (XLEN of the evidence stream) are built here: a
# few milliseconds. Longer ones go to the report worker.
LOCAL_EVENTS = 200
# What a report could not be made for: the routes answer 503.
UNAVAILABLE = (RedisError, OSError, WorkerFailed)
# Set in a response the feed closed (too far behind): uvicorn's error line for a
# response that ended unfinished is then left out (the feed logged why, throttled).
_CLOSED_BEHIND: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "dashboard_closed_behind", default=False
)
_UNFINISHED = "ASGI callable returned without completing response."
# The longest a stream closed for being behind waits for its connection to be gone
# (an abort closes it at the loop's next turn), counted against the cap meanwhile.
_GONE_SECONDS = 5.0


class _ClosedBehindFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _UNFINISHED and _CLOSED_BEHIND.get())


_FILTER = _ClosedBehindFilter()
logging.getLogger("uvicorn.error").addFilter(_FILTER)


def unavailable(exc: Exception) -> Response:
    """The answer (503) when no report could be made: Redis unreachable, or the report
    worker failed."""
    what = "the report could not be built" if isinstance(exc, WorkerFailed) else "redis unavailable"
    return JSONResponse({"error": f"{what}: {exc}"}, status_code=503)


def slices(data: bytes | memoryview) -> Iterator[memoryview]:
    """``data`` in views of at most ``SLICE_BYTES`` (none is a copy)."""
    view = memoryview(data)
    for at in range(0, len(view), SLICE_BYTES):
        yield view[at : at + SLICE_BYTES]


class _Senders:
    """The responses sending an encoded report, by the build it came from, so that
    those too far behind can be closed."""

    def __init__(self) -> None:
        self._by_build: dict[int, set[anyio.CancelScope]] = {}
        self._closed = Throttled(logger, _REFUSAL_LOG_SECONDS)

    @contextlib.contextmanager
    def sending(self, build: int, scope: anyio.CancelScope) -> Iterator[None]:
        held = self._by_build.setdefault(build, set())
        held.add(scope)
        try:
            yield
        finally:
            held.discard(scope)
            if not held and self._by_build.get(build) is held:
                del self._by_build[build]

    def close_before(self, build: int) -> None:
        """Close the responses still sending a report built before ``build``."""
        closed = 0
        for old in [b for b in self._by_build if b < build]:
            for scope in self._by_build.pop(old):
                scope.cancel()
                closed += 1
        if closed:
            self._closed.warning(
                "[dashboard] closed %d response(s) still sending a report two builds old "
                "(their clients read too slowly)",
                closed,
            )


class _Shared:
    """A build under way, and its callers. The task returns nothing: a task's result
    lives as long as the task, and a task that ran Redis commands may be held by the
    reference cycles of redis-py's timeouts until the collector runs (measured: a
    build's report kept after the last dashboard closed). The report is handed over
    here instead, and let go when the last caller has it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.task: asyncio.Task[None]
        self.made: Encoded | Rendered | None = None
        self.waiting = 0


class DashboardFeed:
    """The one reader of the evidence for this server's dashboards."""

    def __init__(
        self,
        redis_url: str,
        recorder: Recorder,
        *,
        block_ms: int,
        max_streams: int,
        max_events: int,
        labels: SessionLabels | None = None,
        log_level: str = "INFO",
        local_events: int = LOCAL_EVENTS,
    ) -> None:
        # Two connections of its own: one blocks following the stream, one builds here.
        self._redis_url = redis_url
        self._follow_redis = state.connect(redis_url, max_connections=1)
        self._build_redis = state.connect(redis_url, max_connections=1)
        self._recorder = recorder
        self._block_ms = block_ms
        self._max_streams = max_streams
        self._max_events = max_events
        self._labels = labels or SessionLabels()
        self._local_events = local_events
        self.worker = ReportWorker(log_level)
        self._streams = 0
        self._follower: asyncio.Task[None] | None = None
        self._building: dict[str, _Shared] = {}
        self._latest: Encoded | None = None
        self._latest_at = float("-inf")
        self._comment: bytes | None = None  # said to every stream instead of a report
        self._version = 0  # counts what the streams were told (reports, comments)
        self._changed = asyncio.Event()
        self._senders = _Senders()
        self._refusals = Throttled(logger, _REFUSAL_LOG_SECONDS)
        self.builds = 0

    @property
    def streams(self) -> int:
        """Dashboard streams open now."""
        return self._streams

    async def encoded(self) -> Encoded:
        """The newest report, encoded (built at most ``_MIN_BUILD_SECONDS`` ago, or now,
        shared with any build under way), with session labels."""
        latest = self._latest
        if latest is not None and time.monotonic() - self._latest_at < _MIN_BUILD_SECONDS:
            return latest
        made = await self._build("report")
        assert isinstance(made, Encoded)
        return made

    async def held(self) -> Encoded:
        """The newest report the feed holds, however old (while streams are open the
        follower keeps it current), else :meth:`encoded`: for what a dashboard asks
        about the report it shows (a session's picture)."""
        return self._latest or await self.encoded()

    async def rendered(self, kind: str) -> Rendered:
        """The newest report as a file in the format named ``kind``
        (:mod:`mcp_lab.evidence.formats`; a build of its own, shared with a build of
        that kind under way)."""
        made = await self._build(kind)
        assert isinstance(made, Rendered)
        return made

    async def _build(self, kind: str) -> Encoded | Rendered:
        """One build of each kind at a time; callers meanwhile share it."""
        shared = self._building.get(kind)
        if shared is None or shared.task.done():
            shared = _Shared(kind)
            shared.task = asyncio.create_task(self._build_now(shared), name=f"dashboard {kind}")
            self._building[kind] = shared
        shared.waiting += 1
        try:
            await asyncio.shield(shared.task)
            assert shared.made is not None
            return shared.made
        finally:
            shared.waiting -= 1
            if shared.task.done() and self._building.get(kind) is shared:
                del self._building[kind]
            if not shared.waiting:
                shared.made = None  # the last caller has it (see _Shared)

    async def _build_now(self, shared: _Shared) -> None:
        unsaved = self._recorder.unsaved_lost
        await self._labels.share(self._build_redis)  # the lab's secret, as Redis has it now
        events = int(await self._build_redis.xlen(contract.EVENTS_STREAM))
        if events <= self._local_events:
            made = await worker.produce(
                self._build_redis,
                shared.kind,
                unsaved=unsaved,
                max_events=self._max_events,
                labels=self._labels,
            )
        else:
            made = await self.worker.produce(
                self._redis_url,
                shared.kind,
                unsaved=unsaved,
                max_events=self._max_events,
                labels=self._labels,
            )
        if isinstance(made, Encoded):
            self.builds += 1
            made = dataclasses.replace(made, build=self.builds)
            self._latest, self._latest_at = made, time.monotonic()
            if self._streams:
                self._publish()
            else:  # kept for /api/report callers within the half second, then let go
                asyncio.get_running_loop().call_later(_MIN_BUILD_SECONDS, self._forget, made)
            self._senders.close_before(made.build - 1)
        if shared.waiting:
            shared.made = made

    def _forget(self, made: Encoded) -> None:
        if self._latest is made and not self._streams:
            self._latest, self._latest_at = None, float("-inf")
            worker.release_free_memory()

    def stream(self) -> Response:
        """The response to ``GET /api/stream``: the reports as server-sent events, or
        503 past the cap."""
        if self._streams >= self._max_streams:
            self._refusals.warning(
                "[dashboard] %d streams open (MCP_TEST_DASHBOARD_MAX_STREAMS=%d): a new one "
                "refused with 503",
                self._streams,
                self._max_streams,
            )
            return JSONResponse(
                {"error": f"{self._streams} dashboard streams open, the most allowed"},
                status_code=503,
                headers={"Retry-After": _REFUSED_RETRY_AFTER},
            )
        return _Watching(self)

    def send_json(self, encoded: Encoded, headers: dict[str, str] | None = None) -> Response:
        """A response sending ``encoded``'s JSON (``/api/report``, the JSON download)."""
        return _Sliced(self, encoded, headers)

    def join(self) -> None:
        """A dashboard stream opened (the follower starts with the first)."""
        self._streams += 1
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(self._follow(), name="dashboard feed")

    def leave(self) -> None:
        """A dashboard stream ended (the follower stops with the last, and the feed lets
        its report go: responses still sending it hold it until they end)."""
        self._streams -= 1
        if not self._streams:
            if self._follower is not None:
                self._follower.cancel()
                self._follower = None
            self._latest, self._latest_at = None, float("-inf")
            self._comment = None
            worker.release_free_memory()

    async def frames(self, scope: anyio.CancelScope) -> AsyncGenerator[bytes | memoryview]:
        """What one dashboard stream sends: the newest report whenever there is a new
        one (in slices), a keep-alive comment after ``block_ms`` without. ``scope``
        closes the stream when it falls two builds behind."""
        yield sse.frame(retry_ms=1000)  # the browser reconnects a second after a lost stream
        seen = -1
        while True:
            if self._version != seen:
                seen = self._version
                if self._comment is not None:
                    yield self._comment
                elif self._latest is not None:
                    latest = self._latest
                    with self._senders.sending(latest.build, scope):
                        for piece in slices(latest.event):
                            yield piece
                    del latest, piece  # the feed alone holds the report between builds
                continue
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), self._block_ms / 1000)
            except TimeoutError:
                yield sse.frame(comment="keepalive")

    def _publish(self, comment: bytes | None = None) -> None:
        self._comment = comment
        self._version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _follow(self) -> None:
        """While streams are open: build a report when events arrive, once per batch."""
        cursor: str | None = None
        while True:
            try:
                if cursor is None:
                    cursor = await reader.last_event_id(self._follow_redis)
                    await self._build("report")
                newest = await reader.wait_for_events(self._follow_redis, cursor, self._block_ms)
                if newest is None:
                    continue
                cursor = newest
                wait = _MIN_BUILD_SECONDS - (time.monotonic() - self._latest_at)
                if wait > 0:
                    await asyncio.sleep(wait)  # more of the batch arrives meanwhile
                await self._build("report")
            except (RedisError, OSError) as exc:
                logger.warning("[dashboard] redis unavailable (%s); retrying", exc)
                self._publish(sse.frame(comment="redis unavailable"))
                cursor = None
                await asyncio.sleep(_RETRY_SECONDS)
            except Exception:  # a bug must not leave every dashboard without reports
                logger.exception("[dashboard] report failed; retrying")
                cursor = None
                await asyncio.sleep(_RETRY_SECONDS)

    async def close(self) -> None:
        """Stop following, end the report worker, release the feed's connections."""
        for task in (self._follower, *(shared.task for shared in self._building.values())):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, *UNAVAILABLE):
                    await task
        await self.worker.close()
        await self._follow_redis.aclose()
        await self._build_redis.aclose()


class _Watching(Response):
    """One open dashboard stream: counted from its start to its end, however it ends."""

    def __init__(self, feed: DashboardFeed) -> None:
        super().__init__()
        self._feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._feed.join()
        behind = anyio.CancelScope()
        frames = self._feed.frames(behind)
        connection = scope.get("extensions", {}).get(CONNECTION_EXTENSION)
        try:
            with behind:
                response = StreamingResponse(
                    frames,
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
                )
                await response(scope, receive, send)
            if behind.cancelled_caught:
                _CLOSED_BEHIND.set(True)
        finally:
            with anyio.CancelScope(shield=True):
                await frames.aclose()  # lets go of the report it was sending, now
                if behind.cancelled_caught and isinstance(connection, Connection):
                    await _closed_at_the_socket(connection)
            self._feed.leave()


async def _closed_at_the_socket(connection: Connection) -> None:
    """Abort the connection of a stream closed for being behind, and wait (bounded)
    until it is gone: the stream counts against the cap until then."""
    connection.abort()
    with anyio.move_on_after(_GONE_SECONDS):
        await connection.gone()


class _Sliced(Response):
    """An encoded report's JSON, sent in slices with its ``Content-Length``."""

    def __init__(
        self, feed: DashboardFeed, encoded: Encoded, headers: dict[str, str] | None
    ) -> None:
        body = encoded.json
        super().__init__(
            media_type="application/json",
            headers={**(headers or {}), "content-length": str(len(body))},
        )
        self._senders = feed._senders
        self._encoded = encoded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        with anyio.CancelScope() as behind, self._senders.sending(self._encoded.build, behind):
            for piece in slices(self._encoded.json):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        if behind.cancelled_caught:
            _CLOSED_BEHIND.set(True)
            connection = scope.get("extensions", {}).get(CONNECTION_EXTENSION)
            if isinstance(connection, Connection):
                with anyio.CancelScope(shield=True):
                    await _closed_at_the_socket(connection)
