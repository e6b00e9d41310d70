"""The evidence record: every message in and every notification out, kept in Redis.

The record is the stream ``mcp:events`` (bounded, shared by all server replicas).
Observation runs are delimited by entries of ``mcp:runs``: a run covers the
events from its start to the next run's start. Recording never fails a request;
while Redis is unreachable the lost events are counted and logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services import contract, store
from services.eventlog import Peer

logger = logging.getLogger("mcp_lab")

INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
# Requests whose response is a long-lived stream.
LONG_LIVED = frozenset({"subscriptions/listen"})
_READ_PAGE = 1000

# What a handler learnt while serving the current message (the resource version
# it read), picked up by the recording middleware when the handler returns.
_annotations: ContextVar[dict[str, Any] | None] = ContextVar("mcp_lab_annotations", default=None)


def annotate(**fields: Any) -> None:
    """Attach fields (``version=...``) to the event of the message being handled."""
    current = _annotations.get()
    if current is not None:
        current.update(fields)


def now_ms() -> int:
    return int(time.time() * 1000)


class Recorder:
    """Writes events to Redis."""

    def __init__(self, redis: Redis, max_events: int) -> None:
        self._redis = redis
        self._max_events = max_events
        self.lost = 0

    async def record(self, event: contract.Event) -> None:
        """Add one event; on a Redis error count it as lost and log it (never raises)."""
        try:
            await self._redis.xadd(
                contract.EVENTS_STREAM,
                event.fields(),  # type: ignore[arg-type]
                maxlen=self._max_events,
                approximate=True,
            )
        except (RedisError, OSError) as exc:
            self.lost += 1
            logger.warning(
                "[evidence] event not recorded (%s); %d lost so far: %s %s session=%s",
                exc,
                self.lost,
                event.direction,
                event.method,
                event.session,
            )

    async def sent(
        self, peer: Peer, method: str, uri: str | None, version: int | None, delivered: bool
    ) -> None:
        """Record a notification sent to ``peer``."""
        await self.record(_event(peer, "out", method, now_ms(), uri, version, delivered=delivered))

    async def resumed(self, peer: Peer, method: str, uri: str | None) -> None:
        """Record a notification written to a stream the client resumed (``Last-Event-ID``)."""
        await self.record(
            _event(peer, "out", method, now_ms(), uri, None, delivered=True, resumed=True)
        )

    def middleware(
        self, peer_of: Callable[[ServerRequestContext[Any], Any], Peer]
    ) -> Callable[[ServerRequestContext[Any], CallNext], Any]:
        """A low-level server middleware recording every inbound message."""

        async def record_inbound(
            ctx: ServerRequestContext[Any], call_next: CallNext
        ) -> HandlerResult:
            received = now_ms()
            params = ctx.params if isinstance(ctx.params, dict) else {}
            if ctx.method in LONG_LIVED:
                # Recorded on arrival: the request lasts as long as its stream.
                await self.record(_inbound(peer_of(ctx, None), ctx.method, received, params))
                return await call_next(ctx)
            notes: dict[str, Any] = {}
            token = _annotations.set(notes)
            error: int | None = None
            try:
                return await call_next(ctx)
            except MCPError as exc:
                error = exc.error.code
                raise
            except ValidationError:
                error = INVALID_PARAMS
                raise
            except Exception:
                error = INTERNAL_ERROR
                raise
            finally:
                _annotations.reset(token)
                peer = peer_of(ctx, params.get("clientInfo"))
                inbound = _inbound(peer, ctx.method, received, params, notes.get("version"), error)
                with anyio.CancelScope(shield=True):  # a cancelled request is still evidence
                    await self.record(inbound)

        return record_inbound


def _uri_of(method: str, params: dict[str, Any]) -> str | None:
    """The resource a message is about: ``params.uri``, or the first URI a listen names."""
    if method == "subscriptions/listen":
        wanted = (params.get("notifications") or {}).get("resourceSubscriptions") or []
        return wanted[0] if wanted and isinstance(wanted[0], str) else None
    uri = params.get("uri")
    return uri if isinstance(uri, str) else None


def _inbound(
    peer: Peer,
    method: str,
    received: int,
    params: dict[str, Any],
    version: int | None = None,
    error: int | None = None,
) -> contract.Event:
    return _event(peer, "in", method, received, _uri_of(method, params), version, error=error)


def _event(
    peer: Peer,
    direction: str,
    method: str,
    ts_ms: int,
    uri: str | None,
    version: int | None,
    *,
    delivered: bool | None = None,
    error: int | None = None,
    resumed: bool = False,
) -> contract.Event:
    return contract.Event(
        ts_ms=ts_ms,
        session=peer.session,
        client=peer.client_name,
        client_version=peer.client_version,
        protocol=peer.protocol,
        transport=peer.transport,
        direction=direction,
        method=method,
        uri=uri,
        version=version,
        delivered=delivered,
        error=error,
        resumed=resumed,
    )


async def start_run(redis: Redis) -> str:
    """Begin a new observation run; returns its id."""
    run_id: str = await redis.xadd(contract.RUNS_STREAM, {"reason": "reset"})
    return run_id


async def run_bounds(redis: Redis, run_id: str | None) -> tuple[str, str, str]:
    """(run id, first event id, last event id) of ``run_id``, or of the current run.

    Before any ``mcp-lab reset`` the current run is everything recorded so far,
    with id ``0-0``. Only entry ids of ``mcp:runs`` are read, never their fields,
    so whatever else was written there does not matter.
    """
    if run_id is None:
        latest = await _raw_ids(redis, "XREVRANGE", contract.RUNS_STREAM, "+", "-", "COUNT", 1)
        return (latest[0], latest[0], "+") if latest else ("0-0", "-", "+")
    if not contract.is_event_id(run_id):
        raise LookupError(f"no run with id {run_id!r}: a run id looks like 1767225600000-0")
    found = await _raw_ids(redis, "XRANGE", contract.RUNS_STREAM, run_id, run_id)
    if not found and run_id != "0-0":
        raise LookupError(f"no run with id {run_id!r}")
    following = await _raw_ids(redis, "XRANGE", contract.RUNS_STREAM, f"({run_id}", "+", "COUNT", 1)
    end = f"({following[0]}" if following else "+"
    return run_id, run_id if found else "-", end


async def _raw_ids(redis: Redis, *command: str | int) -> list[str]:
    """The entry ids of an XRANGE/XREVRANGE reply (fields left undecoded)."""
    return [entry_id.decode() for entry_id, _ in await store.read_raw(redis, *command)]


async def last_event_id(redis: Redis) -> str:
    """Id of the newest entry of ``mcp:events`` (``0-0`` when there is none); its
    fields are not decoded, so an entry anyone else wrote cannot make this fail."""
    ids = await _raw_ids(redis, "XREVRANGE", contract.EVENTS_STREAM, "+", "-", "COUNT", 1)
    return ids[0] if ids else "0-0"


async def wait_for_events(redis: Redis, after: str, block_ms: int) -> str | None:
    """Wait up to ``block_ms`` for entries of ``mcp:events`` past ``after``: the id of
    the newest one, or None when none came (fields not decoded, as above)."""
    reply = await store.read_raw(
        redis, "XREAD", "BLOCK", block_ms, "STREAMS", contract.EVENTS_STREAM, after
    )
    if not reply:
        return None
    newest: bytes = reply[0][1][-1][0]
    return newest.decode()


async def read_events(redis: Redis, first: str, last: str = "+") -> list[contract.Event]:
    """Every well-formed event recorded between two stream ids (inclusive).

    Entries are read undecoded and checked one at a time: one that anyone else
    wrote (a field that is not UTF-8, a missing field, a value the lab never
    records) is left out, and one warning per read says how many and shows the
    first. ``redis`` may decode replies or not.
    """
    events: list[contract.Event] = []
    skipped = _Skipped()
    start = first
    while True:
        page = await store.read_raw(
            redis, "XRANGE", contract.EVENTS_STREAM, start, last, "COUNT", _READ_PAGE
        )
        for entry_id, raw in page:
            try:
                events.append(parse_event(raw))
            except contract.BadMessage as exc:
                skipped.add(entry_id, str(exc), raw)
        if len(page) < _READ_PAGE:
            break
        start = f"({page[-1][0].decode()}"
    skipped.log()
    return events


# datetime cannot show a time past the year 9999; the lab never records one.
_LAST_MS = 253402300799999
_DIRECTIONS = frozenset({"in", "out"})


def parse_event(raw: dict[bytes, bytes] | None) -> contract.Event:
    """One raw entry of ``mcp:events``; raises :class:`contract.BadMessage` with a short
    reason for anything the lab would not have recorded."""
    if not raw:
        raise contract.BadMessage("no fields")
    fields: dict[str, str] = {}
    for key, value in raw.items():
        try:
            fields[key.decode()] = value.decode()
        except UnicodeDecodeError as exc:
            raise contract.BadMessage(f"field {store.shown_value(key)} is not UTF-8") from exc
    try:
        event = contract.Event.from_fields(fields)
    except contract.BadMessage as exc:
        raise contract.BadMessage(_why(exc.__cause__)) from exc
    if not 0 <= event.ts_ms <= _LAST_MS:
        raise contract.BadMessage(f"time {event.ts_ms} is outside 0..{_LAST_MS} ms")
    if event.direction not in _DIRECTIONS:
        shown = store.shown_value(raw[b"direction"])
        raise contract.BadMessage(f"direction {shown} is neither 'in' nor 'out'")
    return event


def _why(cause: BaseException | None) -> str:
    """Why :meth:`contract.Event.from_fields` refused an entry, without its fields."""
    if isinstance(cause, KeyError):
        return f"no field {cause.args[0]!r}"
    return store.shorten(str(cause), 120)


class _Skipped:
    """The entries a read left out: counted, the first one kept for the log line."""

    def __init__(self) -> None:
        self.count = 0
        self._first = ""

    def add(self, entry_id: bytes, reason: str, raw: dict[bytes, bytes] | None) -> None:
        if not self.count:
            fields = store.shown_fields(raw or {})
            self._first = f"{entry_id.decode()}: {reason} (fields={fields})"
        self.count += 1

    def log(self) -> None:
        if self.count:
            logger.warning(
                "[evidence] left out %d malformed entr%s of %s; first %s",
                self.count,
                "y" if self.count == 1 else "ies",
                contract.EVENTS_STREAM,
                self._first,
            )
