"""The server's service (services/mcp_lab/server/service.py): the limit of subscriptions per
session, and an ended session's states gone from Redis (in-process servers and
updaters, tests/support/inproc.py; real Redis, real SDK clients)."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mcp_lab import contract, state
from mcp_lab.evidence import build, report
from tests.support.lab import STATUS_URI, connect

pytestmark = pytest.mark.anyio

BOUND = 15.0
NO_AUTO_UPDATE = "600"


def _uri(at: int) -> str:
    return f"test://review/item-{at}"


async def test_a_subscribe_past_the_limit_gets_a_clear_error_and_is_counted(
    inproc, redis_url
) -> None:
    server, url = await inproc.server(
        scenario="template",
        update_delay_seconds=NO_AUTO_UPDATE,
        max_subscriptions_per_session="3",
    )
    async with connect(url, "greedy") as client:
        for at in range(3):
            await client.session.subscribe_resource(_uri(at))
        await client.session.subscribe_resource(_uri(0))  # held already: not a new one
        with pytest.raises(MCPError) as refused:
            await client.session.subscribe_resource(_uri(3))
        error = refused.value.error
        assert error.code == contract.SUBSCRIPTION_LIMIT_ERROR
        assert "Subscription limit reached" in error.message and "3" in error.message
        assert error.data == {"uri": _uri(3), "limit": 3}
        await server.await_line(r"\[resources/subscribe\] uri=test://review/item-3 .*error=limit")
        # One given back makes room for another.
        await client.session.unsubscribe_resource(_uri(1))
        await client.session.subscribe_resource(_uri(3))
        with pytest.raises(MCPError):
            await client.session.subscribe_resource(_uri(4))
    redis = state.connect(redis_url)
    try:
        made = await build.build(redis)
    finally:
        await redis.aclose()
    greedy = next(c for c in report.to_json(made)["clients"] if c["client"] == "greedy")
    assert any(n.startswith("2 subscribe(s) refused") for n in greedy["notes"]), greedy["notes"]


async def test_the_limit_is_per_session(inproc) -> None:
    _, url = await inproc.server(
        scenario="template",
        update_delay_seconds=NO_AUTO_UPDATE,
        max_subscriptions_per_session="1",
    )
    async with connect(url, "one") as one, connect(url, "two") as two:
        await one.session.subscribe_resource(_uri(0))
        await two.session.subscribe_resource(_uri(0))
        await two.session.subscribe_resource(_uri(0))
        with pytest.raises(MCPError):
            await one.session.subscribe_resource(_uri(1))


async def test_an_ended_session_leaves_no_state_in_redis(inproc, redis_client) -> None:
    """Its states of every URI it subscribed to (one unsubscribed before the end too)
    go when it closes, and a job of it still due does not make one again."""
    server, url = await inproc.server(scenario="template", update_delay_seconds="0.2")
    updater = await inproc.updater(scenario="template", update_delay_seconds="0.2")
    async with connect(url, "leaver") as client:
        await client.session.subscribe_resource(_uri(0))
        await client.session.subscribe_resource(_uri(1))
        await client.wait_updated(2, timeout=BOUND)
        line = await server.await_line(r"\[initialize\] .*client=leaver/")
        session = line.split("session=")[1].split()[0]
        await client.session.unsubscribe_resource(_uri(1))
        assert redis_client.exists(*(contract.state_key(session, _uri(at)) for at in (0, 1))) == 2
        await client.session.subscribe_resource(_uri(2))  # due after the session ended
    await server.await_line(r"\[session/end\] closed .*client=leaver/")
    await updater.await_line(rf"session {session} is no longer subscribed", timeout=BOUND)
    assert list(redis_client.scan_iter(match=f"{contract.STATE_KEY_PREFIX}{session}:*")) == []


async def test_in_shared_scope_the_state_stays_when_a_session_ends(inproc, redis_client) -> None:
    server, url = await inproc.server(state_scope="shared", update_delay_seconds="0.2")
    await inproc.updater(state_scope="shared", update_delay_seconds="0.2")
    async with connect(url, "sharer") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=BOUND)
    await server.await_line(r"\[session/end\] closed .*client=sharer/")
    key = contract.state_key(contract.SHARED_SCOPE, STATUS_URI)
    assert redis_client.hget(key, "version") == "2"
