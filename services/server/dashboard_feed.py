"""The dashboard's data, built once however many watch it.

One reader per server follows the evidence stream (on a Redis connection of its
own, not the request pool) while at least one dashboard stream is open. When
events arrive it builds the report once (at most every ``_MIN_BUILD_SECONDS``,
so a burst of events is one batch) and every open stream gets that one result,
already framed. ``/api/report`` gets the newest report, or shares the build
under way (on a second connection of the feed's own). Each report reads at most
``MCP_TEST_DASHBOARD_MAX_EVENTS`` events, the newest of the run. At most
``MCP_TEST_DASHBOARD_MAX_STREAMS`` streams are open at once; past that a stream
gets 503 with ``Retry-After``. What a report shows of sessions is their labels
(:mod:`services.evidence.labels`), never their ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from services import sse, state
from services.evidence import build, reader, report
from services.evidence.labels import SessionLabels
from services.evidence.recorder import Recorder
from services.logs import Throttled

logger = logging.getLogger("mcp_lab.dashboard")

# Events arriving within this long of the last build wait for the next one (one batch).
_MIN_BUILD_SECONDS = 0.5
_RETRY_SECONDS = 2.0
_REFUSED_RETRY_AFTER = "10"
_REFUSAL_LOG_SECONDS = 10.0


async def build_report(
    redis: Redis, recorder: Recorder | None, max_events: int, run_id: str | None = None
) -> tuple[build.Report, dict[str, Any]]:
    """The report of ``run_id`` (the current run when None), from at most its
    ``max_events`` newest events (the one report builder, :mod:`services.evidence.build`),
    and its JSON. Its ``missing_events`` adds the events this server lost and could not
    count in Redis yet (``recorder``)."""
    unsaved = recorder.unsaved_lost if recorder is not None else 0
    made = await build.build(redis, run=run_id, unsaved_lost=unsaved, max_events=max_events)
    return made, report.to_json(made)


def _framed(data: dict[str, Any]) -> bytes:
    return sse.frame(json.dumps(data, separators=(",", ":")), event="report")


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
    ) -> None:
        # Two connections of its own: one blocks following the stream, one builds.
        self._follow_redis = state.connect(redis_url, max_connections=1)
        self._build_redis = state.connect(redis_url, max_connections=1)
        self._recorder = recorder
        self._block_ms = block_ms
        self._max_streams = max_streams
        self._max_events = max_events
        self._labels = labels or SessionLabels()
        self._streams = 0
        self._follower: asyncio.Task[None] | None = None
        self._building: asyncio.Task[dict[str, Any]] | None = None
        self._latest: dict[str, Any] | None = None
        self._latest_made: build.Report | None = None
        self._latest_at = float("-inf")
        self._frame: bytes | None = None
        self._version = 0
        self._changed = asyncio.Event()
        self._refusals = Throttled(logger, _REFUSAL_LOG_SECONDS)
        self.builds = 0

    @property
    def streams(self) -> int:
        """Dashboard streams open now."""
        return self._streams

    async def report(self) -> dict[str, Any]:
        """The newest report (built at most ``_MIN_BUILD_SECONDS`` ago, or now, shared
        with any build under way), with session labels."""
        if self._latest is not None and time.monotonic() - self._latest_at < _MIN_BUILD_SECONDS:
            return self._latest
        return await self._build()

    async def _build(self) -> dict[str, Any]:
        """One build at a time; callers meanwhile share it."""
        if self._building is None or self._building.done():
            self._building = asyncio.create_task(self._build_now(), name="dashboard report")
        return await asyncio.shield(self._building)

    async def built(self) -> tuple[build.Report, dict[str, Any]]:
        """The newest report as :meth:`report` gives it, with the report it was made
        from (for the renderings that take one: markdown). Sessions in the JSON are
        labelled; the markdown shows no session at all."""
        await self.report()
        made = self._latest_made
        assert made is not None and self._latest is not None
        return made, self._latest

    async def _build_now(self) -> dict[str, Any]:
        made, data = await build_report(self._build_redis, self._recorder, self._max_events)
        self.builds += 1
        self._latest, self._latest_made = self._labels.public(data), made
        self._latest_at = time.monotonic()
        return self._latest

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

    def join(self) -> None:
        """A dashboard stream opened (the follower starts with the first)."""
        self._streams += 1
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(self._follow(), name="dashboard feed")

    def leave(self) -> None:
        """A dashboard stream ended (the follower stops with the last)."""
        self._streams -= 1
        if not self._streams and self._follower is not None:
            self._follower.cancel()
            self._follower = None

    async def frames(self) -> AsyncIterator[bytes]:
        """What one dashboard stream sends: the newest report whenever there is a new
        one, a keep-alive comment after ``block_ms`` without."""
        yield sse.frame(retry_ms=1000)  # the browser reconnects a second after a lost stream
        seen = -1
        while True:
            if self._frame is not None and self._version != seen:
                seen = self._version
                yield self._frame
                continue
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), self._block_ms / 1000)
            except TimeoutError:
                yield sse.frame(comment="keepalive")

    def _publish(self, frame: bytes) -> None:
        self._frame = frame
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
                    self._publish(_framed(await self._build()))
                newest = await reader.wait_for_events(self._follow_redis, cursor, self._block_ms)
                if newest is None:
                    continue
                cursor = newest
                wait = _MIN_BUILD_SECONDS - (time.monotonic() - self._latest_at)
                if wait > 0:
                    await asyncio.sleep(wait)  # more of the batch arrives meanwhile
                self._publish(_framed(await self._build()))
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
        """Stop following and release the feed's connections."""
        for task in (self._follower, self._building):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                    await task
        await self._follow_redis.aclose()
        await self._build_redis.aclose()


class _Watching(Response):
    """One open dashboard stream: counted from its start to its end, however it ends."""

    def __init__(self, feed: DashboardFeed) -> None:
        super().__init__()
        self._feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._feed.join()
        try:
            response = StreamingResponse(
                self._feed.frames(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )
            await response(scope, receive, send)
        finally:
            self._feed.leave()
