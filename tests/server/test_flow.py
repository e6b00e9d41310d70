"""The ideal client flow: the server app and the updater in the test's event loop
(tests/support/inproc.py), the mcp SDK client, a real Redis."""

from __future__ import annotations

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

DELAY = "0.5"
# Delay plus this bound: how long a notification may take to arrive.
BOUND = 10.0


async def test_full_flow_reaches_version_2_and_logs_the_seed_lines(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)

    async with connect(url, "flow-client") as client:
        assert client.init is not None
        resources = client.init.capabilities.resources
        assert resources is not None and resources.subscribe and resources.list_changed
        assert client.init.capabilities.tools is None
        assert client.init.capabilities.prompts is None
        assert client.init.capabilities.logging is None

        listed = await client.session.list_resources()
        assert [str(r.uri) for r in listed.resources] == [STATUS_URI]
        assert listed.resources[0].mime_type == "text/plain"

        first = await client.read_text()
        assert first == (
            "status: pending\nversion: 1\nmessage: Waiting for simulated review result."
        )
        await client.session.subscribe_resource(STATUS_URI)
        assert await client.wait_updated(1, timeout=float(DELAY) + BOUND) == [STATUS_URI]
        second = await client.read_text()
        assert second == (
            "status: reviewed\nversion: 2\nmessage: Simulated review result is now available."
        )

    who = r"session=\w+ client=flow-client/1\.0"
    expected = [
        rf"\[initialize\] client connected {who}",
        rf"\[resources/list\] requested {who}",
        rf"\[resources/read\] uri=test://review/status version=1 {who}",
        rf"\[resources/subscribe\] uri=test://review/status {who}",
        rf"\[resource/update\] uri=test://review/status version=2 {who}",
        rf"\[notification/send\] notifications/resources/updated uri=test://review/status {who}",
        rf"\[resources/read\] uri=test://review/status version=2 {who}",
    ]
    position = 0
    for pattern in expected:
        line = await server.await_line(pattern, timeout=5, since=position)
        position = server.lines.index(line, position) + 1


async def test_unknown_uri_is_named_in_a_32002_error(inproc) -> None:
    _, url = await inproc.server()
    async with connect(url) as client:
        for call in (client.session.read_resource, client.session.subscribe_resource):
            with pytest.raises(MCPError) as caught:
                await call("test://no/such")
            assert caught.value.error.code == -32002
            assert caught.value.error.data == {"uri": "test://no/such"}


async def test_tool_is_offered_only_when_enabled(inproc) -> None:
    _, url = await inproc.server(enable_tool="true")
    async with connect(url) as client:
        assert client.init is not None and client.init.capabilities.tools is not None
        tools = await client.session.list_tools()
        assert [t.name for t in tools.tools] == ["get_review_status"]
        result = await client.session.call_tool("get_review_status", {})
        content = result.content[0]
        assert isinstance(content, mcp_types.TextContent)
        assert version_of(content.text) == 1


async def test_session_scope_keeps_other_sessions_at_version_1(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)
    async with connect(url, "subscriber") as a, connect(url, "bystander") as b:
        await a.session.subscribe_resource(STATUS_URI)
        await a.wait_updated(1, timeout=float(DELAY) + BOUND)
        await server.await_line(r"\[notification/send\] .*client=subscriber/", timeout=5)
        await b.session.send_ping()  # anything in flight to b has arrived by now
        assert b.updated == []
        assert server.matching(r"\[notification/send\] .*client=bystander/") == []
        assert version_of(await b.read_text()) == 1
        assert version_of(await a.read_text()) == 2


async def test_shared_scope_shows_the_new_version_to_every_session(inproc) -> None:
    _, url = await inproc.server(update_delay_seconds=DELAY, state_scope="shared")
    await inproc.updater(update_delay_seconds=DELAY, state_scope="shared")
    async with connect(url, "subscriber") as a, connect(url, "bystander") as b:
        assert version_of(await b.read_text()) == 1
        await a.session.subscribe_resource(STATUS_URI)
        await a.wait_updated(1, timeout=float(DELAY) + BOUND)
        assert b.updated == []
        assert version_of(await b.read_text()) == 2


async def test_later_subscribe_bumps_again(inproc) -> None:
    _, url = await inproc.server(update_delay_seconds=DELAY)
    await inproc.updater(update_delay_seconds=DELAY)
    async with connect(url) as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=float(DELAY) + BOUND)
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(2, timeout=float(DELAY) + BOUND)
        assert version_of(await client.read_text()) == 3


async def test_unsubscribe_stops_notifications(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds="1")
    updater = await inproc.updater(update_delay_seconds="1")
    async with connect(url, "quitter") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.session.unsubscribe_resource(STATUS_URI)
        await server.await_line(r"\[resources/unsubscribe\] .*was_subscribed=True", timeout=5)
        # The job still comes due, and leaves the state of a session no longer
        # subscribed alone: nothing is published, nobody notified.
        await updater.await_line(r"is no longer subscribed; its state not updated", timeout=BOUND)
        await client.session.send_ping()
        assert client.updated == []
        assert server.matching(r"\[notification/send\]") == []


async def test_list_changed_follows_each_update_when_enabled(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY, send_list_changed="true")
    await inproc.updater(update_delay_seconds=DELAY)
    async with connect(url, "lister") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=float(DELAY) + BOUND)
        line = r"\[notification/send\] notifications/resources/list_changed .*client=lister/"
        await server.await_line(line, timeout=5)
        await client.session.send_ping()
        assert client.list_changed == 1


async def test_nothing_is_sent_after_the_session_ends(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds="1")
    updater = await inproc.updater(update_delay_seconds="1")
    async with connect(url, "leaver") as client:
        await client.session.subscribe_resource(STATUS_URI)
    await server.await_line(r"\[session/end\] closed .*client=leaver/.* subscriptions=1")
    await updater.await_line(r"is no longer subscribed; its state not updated", timeout=BOUND)
    assert server.matching(r"\[notification/send\]") == []
