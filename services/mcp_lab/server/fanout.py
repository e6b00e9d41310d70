"""The relay's fan-out: one round of updates written to many Streamable HTTP sessions'
GET streams at once, doing the SDK's message router's work itself. Each URI's
notification is built and serialised once (:class:`PreparedNotification`), every
session's event is stored for resumption together (each with its own event id), then
put on the session's GET stream queue without waiting; a full queue (a client not
reading) gets a bounded wait of its own. The log lines go out before anything else
runs and the evidence records are written in one batch. Who is notified of what is
decided by :mod:`mcp_lab.server.relay`; :mod:`mcp_lab.server.notify` hands here the
subscribers whose delivery is batched: a :class:`~mcp_lab.server.delivery.GetStreamDelivery`
with a usable GET stream, open or not (docs/performance.md, "Fan-out").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import anyio
import mcp_types
from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage, EventStore
from mcp_types import JSONRPCMessage, JSONRPCNotification
from pydantic import PrivateAttr

from mcp_lab import protocol
from mcp_lab.contract import Peer
from mcp_lab.evidence.recorder import Recorder, Sent, now_ms
from mcp_lab.logs import events
from mcp_lab.process import heap
from mcp_lab.server import mcp_adapter
from mcp_lab.server.delivery import GetStreamDelivery
from mcp_lab.server.resume.eventstore import store_events
from mcp_lab.server.sessions import SessionRegistry, Subscriber
from mcp_lab.settings import LabSettings

logger = logging.getLogger("mcp_lab.relay")

UPDATED, LIST_CHANGED = protocol.UPDATED, protocol.LIST_CHANGED
SEND_TIMEOUT_SECONDS = 5.0
NO_STREAM = "delivered=no (no open GET stream)"
# Event loop rounds a fan-out yields for the GET streams' writers before its
# bookkeeping (measured: enough for 1,000 sessions' notifications to reach the socket).
_WRITER_ROUNDS = 12


async def _let_writers_run() -> None:
    """Yield to the event loop for a few rounds, so that the GET streams' writers
    woken by a fan-out's puts write the notifications before the fan-out's own
    bookkeeping (evidence records, log lines) takes the CPU: each round lets every
    ready task take one step, and a notification's way from the queue to the
    socket is a handful of steps (the SDK's stream writer, sse-starlette, the ASGI
    send chain). Bounded: the bookkeeping waits at most these rounds."""
    for _ in range(_WRITER_ROUNDS):
        await asyncio.sleep(0)


def _stream_of(target: Subscriber) -> mcp_adapter.GetStream:
    """The GET stream a batched subscriber is written to: notify.py hands the fan-out
    only subscribers whose delivery said it is batched, which only a
    :class:`GetStreamDelivery` with a stream does."""
    return cast(mcp_adapter.GetStream, cast(GetStreamDelivery, target.delivery).stream)


def failed(exc: BaseException) -> str:
    return f"delivered=no (send failed: {type(exc).__name__})"


def _log(outcomes: list[_Outcome]) -> None:
    """The log lines of sent notifications, in the order they were put."""
    lines: list[tuple[str, str, Peer, str]] = []
    for o in outcomes:
        peer = o.target.peer
        if o.method == UPDATED:
            lines.append(("resource/update", f"uri={o.uri} version={o.version}", peer, ""))
            lines.append(("notification/send", f"{UPDATED} uri={o.uri}", peer, o.problem))
        else:
            lines.append(("notification/send", o.method, peer, o.problem))
    events(lines)


class PreparedNotification(JSONRPCNotification):
    """A JSON-RPC notification serialised once, however many streams carry it.

    The SDK serialises each message it writes to a Streamable HTTP stream with
    ``model_dump_json(by_alias=True, exclude_unset=True)``, and the lab's event
    store keeps the same form (``resume.eventstore.encode``). For a publish to
    thousands of sessions that is the same text thousands of times: this model
    answers that exact call with the text made when it was built (any other
    call is pydantic's own). Build it with :func:`prepared_notification`.
    """

    _json: str = PrivateAttr(default="")

    def model_dump_json(self, **kwargs: Any) -> str:
        if self._json and kwargs == _SDK_DUMP:
            return self._json
        return super().model_dump_json(**kwargs)


_SDK_DUMP: dict[str, Any] = {"by_alias": True, "exclude_unset": True}


def prepared_notification(notification: mcp_types.ServerNotification) -> PreparedNotification:
    """``notification`` as the JSON-RPC message ``ServerSession.send_notification``
    would write for it (params dumped as the SDK dumps them), serialised once."""
    data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
    params = data.get("params")
    if params is not None:
        message = PreparedNotification(jsonrpc="2.0", method=data["method"], params=dict(params))
    else:
        message = PreparedNotification(jsonrpc="2.0", method=data["method"])
    message._json = JSONRPCNotification.model_dump_json(message, **_SDK_DUMP)
    return message


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One notification sent (or not), to log and record."""

    target: Subscriber
    method: str
    uri: str
    version: int | str | None
    delivered: bool
    problem: str
    ts_ms: int
    due_ms: int | None

    def sent(self) -> Sent:
        uri = self.uri if self.method == UPDATED else None
        version = self.version if isinstance(self.version, int) and uri else None
        due = self.due_ms if uri else None
        return Sent(self.target.peer, self.method, uri, version, self.delivered, self.ts_ms, due)


@dataclass(frozen=True, slots=True)
class Target:
    """One subscriber of an update: the URI, the version to tell it, when it was due."""

    target: Subscriber
    uri: str
    version: int | str | None
    due_ms: int | None


@dataclass(frozen=True, slots=True)
class _Pending:
    """One event of a fan-out, on its way to a session's GET stream."""

    target: Subscriber
    uri: str
    method: str
    version: int | str | None
    event: EventMessage
    due_ms: int | None

    def outcome(self, delivered: bool, problem: str) -> _Outcome:
        return _Outcome(
            self.target,
            self.method,
            self.uri,
            self.version,
            delivered,
            problem,
            now_ms(),
            self.due_ms,
        )


class FanOut:
    """Notifies Streamable HTTP sessions by writing to their GET streams directly."""

    def __init__(
        self, settings: LabSettings, registry: SessionRegistry, recorder: Recorder
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._recorder = recorder

    def _prepared(self, uri: str) -> list[tuple[str, PreparedNotification]]:
        """The notifications of one update, as the SDK would build them, built once."""
        updated = mcp_types.ResourceUpdatedNotification(
            params=mcp_types.ResourceUpdatedNotificationParams(uri=uri)
        )
        prepared = [(UPDATED, prepared_notification(updated))]
        if self._settings.send_list_changed:
            changed = mcp_types.ResourceListChangedNotification()
            prepared.append((LIST_CHANGED, prepared_notification(changed)))
        return prepared

    async def fan_out(self, targets: list[Target]) -> None:
        """Notify Streamable HTTP sessions by writing to their GET streams directly,
        as the SDK's message router would: each URI's notification built and
        serialised once; every session's event stored for resumption (together, see
        :func:`store_events`; each gets its own event id), then put on the session's
        GET stream queue if one is open. A queue that is full (a client not
        reading) gets a bounded wait of its own; the rest are recorded at once.
        Delivered: the lab saw the GET stream open and the put succeeded."""
        if not targets:
            return
        prepared = {uri: self._prepared(uri) for uri in dict.fromkeys(t.uri for t in targets)}
        entries: list[tuple[EventStore, str, JSONRPCMessage]] = []
        for one in targets:
            store = _stream_of(one.target).event_store
            if store is not None:
                entries += [(store, GET_STREAM_KEY, message) for _, message in prepared[one.uri]]
        ids = iter(await self._store(entries))
        outcomes: list[_Outcome] = []
        blocked: list[tuple[_Pending, list[_Pending]]] = []
        # The puts and the writers' rounds allocate in a burst; a collection then
        # would hold up every notification (services/mcp_lab/process/heap.py). Bounded: no I/O here.
        with heap.collection_deferred():
            self._put_all(targets, prepared, ids, outcomes, blocked)
            # Logged before anything else runs: a client's re-read prompted by the
            # notification must not reach the log before the notification does.
            _log(outcomes)
            try:
                if outcomes:
                    await _let_writers_run()
            finally:
                # Cancelled (shutdown) right after the puts, the notifications are
                # on their way: their records are still written (the writer is
                # flushed after the relay stops).
                await self._record(outcomes)
        if blocked:
            late = await asyncio.gather(*(self._push(first, rest) for first, rest in blocked))
            await self._record([outcome for some in late for outcome in some])

    def _put_all(
        self,
        targets: list[Target],
        prepared: dict[str, list[tuple[str, PreparedNotification]]],
        ids: Iterator[str | None],
        outcomes: list[_Outcome],
        blocked: list[tuple[_Pending, list[_Pending]]],
    ) -> None:
        """Put each target's events on its GET stream queue, without waiting: an
        outcome for each, or (a full queue) the events left for :meth:`_push`."""
        for one in targets:
            stream = _stream_of(one.target)
            kept = stream.event_store is not None
            queue = stream.queue()
            can_deliver = one.target.delivery.can_deliver(self._registry)
            pending = []
            for method, message in prepared[one.uri]:
                event = EventMessage(message, next(ids) if kept else None)
                pending.append(
                    _Pending(one.target, one.uri, method, one.version, event, one.due_ms)
                )
            for at, item in enumerate(pending):
                if queue is None:  # the SDK would store it and drop it, as here
                    outcomes.append(item.outcome(False, NO_STREAM))
                    continue
                try:
                    queue.send_nowait(item.event)
                except anyio.WouldBlock:
                    blocked.append((item, pending[at + 1 :]))
                    break
                except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    outcomes.append(item.outcome(False, failed(exc)))
                else:
                    problem = "" if can_deliver else NO_STREAM
                    outcomes.append(item.outcome(can_deliver, problem))

    async def _store(
        self, entries: list[tuple[EventStore, str, JSONRPCMessage]]
    ) -> list[str | None]:
        """Store the fan-out's events for resumption. No timeout of its own, as for
        the SDK's ``store_event``: the batch writer bounds each round trip, and on a
        Redis that fails the events go out without ids (logged by the store). A
        timeout here could not take back a write still queued, whose event would
        then be replayed with an id the client never saw."""
        if not entries:
            return []
        return await store_events(entries)

    async def _push(self, first: _Pending, rest: list[_Pending]) -> list[_Outcome]:
        """Put events on a GET stream whose queue is full, each send bounded and
        logged as soon as it is done (no event-loop turn between)."""
        outcomes = []
        for item in [first, *rest]:
            outcome = await self._push_one(item)
            _log([outcome])
            outcomes.append(outcome)
        return outcomes

    async def _push_one(self, item: _Pending) -> _Outcome:
        queue = _stream_of(item.target).queue()
        if queue is None:
            return item.outcome(False, NO_STREAM)
        try:
            async with asyncio.timeout(SEND_TIMEOUT_SECONDS):
                await queue.send(item.event)
        except Exception as exc:
            logger.warning(
                "[relay] sending %s to session=%s failed: %r",
                item.method,
                item.target.peer.session,
                exc,
            )
            return item.outcome(False, failed(exc))
        delivered = item.target.delivery.can_deliver(self._registry)
        return item.outcome(delivered, "" if delivered else NO_STREAM)

    async def _record(self, outcomes: list[_Outcome]) -> None:
        """The evidence records of sent notifications, in one batch: while they are
        written, the GET streams' writers put the notifications on the wire."""
        if outcomes:
            await self._recorder.sent_many([o.sent() for o in outcomes])
