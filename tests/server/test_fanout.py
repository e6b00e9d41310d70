"""One publish to many sessions (the relay's fan-out, services/mcp_lab/server/fanout.py) on an
in-process server: every session notified once, on its GET stream, with an event id
it can resume from; one evidence record per session with the right delivered flag;
the version read once per publish, not once per session."""

from __future__ import annotations

import contextlib

import anyio
import mcp_types
import pytest

from mcp_lab import contract
from mcp_lab.catalog import REVIEW_STATUS
from mcp_lab.server import fanout
from mcp_lab.server.resume.eventstore import entry_of
from tests.support.sse import (
    CHANNEL,
    SseStream,
    assert_updated,
    get_stream_in_process,
    subscribed_raw,
)

pytestmark = pytest.mark.anyio

SESSIONS = 30
UPDATED = "notifications/resources/updated"


def notification_records(redis_client, sessions: set[str]) -> dict[str, list[dict]]:
    """The ``notifications/resources/updated`` records of ``sessions``, per session."""
    found: dict[str, list[dict]] = {s: [] for s in sessions}
    for _, fields in redis_client.xrange(contract.EVENTS_STREAM):
        if fields.get("method") == UPDATED and fields.get("session") in sessions:
            found[fields["session"]].append(fields)
    return found


def version_reads(redis_client) -> int:
    """How many HMGETs (the command that reads a resource's version) Redis has served."""
    return int(redis_client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))


async def test_one_publish_reaches_every_session_once_and_records_each_truthfully(
    inproc, redis_client
) -> None:
    server, url = await inproc.server(update_delay_seconds="600", state_scope="shared")
    listening = [await subscribed_raw(url, f"fan-{n}") for n in range(SESSIONS)]
    closed = await subscribed_raw(url, "fan-closed")
    sessions = {str(raw.session_id) for raw in [*listening, closed]}
    try:
        async with contextlib.AsyncExitStack() as streams:
            # The closed one had a GET stream, and it ended before the publish.
            async with get_stream_in_process(url, str(closed.session_id)) as stream:
                await stream.next()
            await server.await_line(r"\[stream/close\] .*client=fan-closed/")
            opened: list[SseStream] = []
            for raw in listening:
                opening = get_stream_in_process(url, str(raw.session_id))
                stream = await streams.enter_async_context(opening)
                await stream.next()  # the priming event: the stream is open
                opened.append(stream)

            # Every session is written to directly (the relay's fan-out), none through
            # the SDK's per-session path.
            subscribers = server.lab.registry.all_subscribers()
            assert len(subscribers) == SESSIONS + 1
            assert all(s.delivery.batched for s in subscribers)

            mark = server.mark()
            reads = version_reads(redis_client)
            # A bare URI: the relay reads the version itself.
            assert redis_client.publish(CHANNEL, REVIEW_STATUS.uri) == 1
            received = []
            with anyio.fail_after(15):
                for stream in opened:
                    received.append(await stream.next_message())
            for event in received:
                assert_updated(event)
            for raw in listening:
                await server.await_line(rf"\[notification/send\] .*client={raw.name}/", since=mark)
            await server.await_line(
                r"\[notification/send\] .*client=fan-closed/.* delivered=no ", since=mark
            )
            sends = server.matching(r"\[notification/send\] ", since=mark)
            assert len(sends) == SESSIONS + 1
            assert len(server.matching(r"\[resource/update\] .* version=1 ", since=mark)) == (
                SESSIONS + 1
            )
            # Shared scope: one version, read once for all the sessions.
            assert version_reads(redis_client) - reads == 1
    finally:
        for raw in [*listening, closed]:
            await raw.close()

    # Each event a client saw is the one kept for its session's resumption, and
    # the closed session's event is kept too: it can resume and get it.
    for raw, event in zip(listening, received, strict=True):
        entry = entry_of(str(event.id))
        assert entry is not None, event.id
        kept = redis_client.xrange(contract.resume_key(str(raw.session_id)), entry[0], entry[0])
        assert len(kept) == 1 and UPDATED in kept[0][1][contract.RESUME_MESSAGE_FIELD]
        assert kept[0][1][contract.RESUME_TAG_FIELD] == entry[1]
    kept = redis_client.xrange(contract.resume_key(str(closed.session_id)))
    assert [e for e in kept if UPDATED in e[1][contract.RESUME_MESSAGE_FIELD]]
    # The records are written after the log lines; stopping flushes the writer.
    assert await server.stop() == []
    records = notification_records(redis_client, sessions)
    for session, found in records.items():
        assert len(found) == 1, (session, found)
        assert found[0]["version"] == "1"
        expected = "0" if session == closed.session_id else "1"
        assert found[0]["delivered"] == expected, (session, found[0])


@pytest.mark.parametrize(
    "notification",
    [
        mcp_types.ResourceUpdatedNotification(
            params=mcp_types.ResourceUpdatedNotificationParams(uri=REVIEW_STATUS.uri)
        ),
        mcp_types.ResourceListChangedNotification(),
    ],
    ids=["updated", "list_changed"],
)
def test_a_prepared_notification_is_what_the_sdk_would_write(notification) -> None:
    # As ServerSession.send_notification and JSONRPCDispatcher.notify build it.
    data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
    if data.get("params") is not None:
        sdk = mcp_types.JSONRPCNotification(
            jsonrpc="2.0", method=data["method"], params=dict(data["params"])
        )
    else:
        sdk = mcp_types.JSONRPCNotification(jsonrpc="2.0", method=data["method"])
    prepared = fanout.prepared_notification(notification)
    # The transport's SSE writer and the resume store serialise with these options.
    wire = {"by_alias": True, "exclude_unset": True}
    assert prepared.model_dump_json(**wire) == sdk.model_dump_json(**wire)
    assert prepared.model_dump_json() == sdk.model_dump_json()
    assert prepared.model_dump() == sdk.model_dump()
