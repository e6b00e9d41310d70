"""A missing Redis: server and updater report it, keep running, and recover."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcp_lab import contract
from mcp_lab.catalog import REVIEW_NOTES
from mcp_lab.process.embedded_redis import free_port, start_redis
from tests.support.lab import STATUS_URI, LabProcess, amcp_lab, connect, lab_env, version_of

pytestmark = pytest.mark.anyio


async def healthcheck(env: dict[str, str], process: str) -> subprocess.CompletedProcess[str]:
    return await amcp_lab(env, "healthcheck", process)


async def test_server_and_updater_wait_for_redis_and_recover_without_restart() -> None:
    redis_port = free_port()
    http_port = free_port()
    env = lab_env(
        f"redis://127.0.0.1:{redis_port}/0", port=str(http_port), update_delay_seconds="0.3"
    )
    cli = [sys.executable, "-m", "mcp_lab"]
    server = LabProcess("server", [*cli, "server"], env)
    updater = LabProcess("updater", [*cli, "updater"], env)
    redis = None
    try:
        await server.await_line(r"\[relay\] redis unavailable")
        await updater.await_line(r"\[updater\] redis unavailable")
        await server.await_line(r"\[lab\] server ready .*relay=disconnected", timeout=20)
        unhealthy = await healthcheck(env, "server")
        assert unhealthy.returncode == 1
        assert "unhealthy" in unhealthy.stderr
        assert (await healthcheck(env, "updater")).returncode == 1
        assert "Traceback" not in "\n".join(server.lines + updater.lines)

        redis = start_redis(redis_port)
        await server.await_line(r"\[relay\] subscribed", timeout=20)
        await updater.await_line(r"\[updater\] ready", timeout=20)
        assert (await healthcheck(env, "server")).returncode == 0
        assert (await healthcheck(env, "updater")).returncode == 0

        async with connect(f"http://127.0.0.1:{http_port}/mcp", "patient") as client:
            await client.session.subscribe_resource(STATUS_URI)
            await client.wait_updated(1, timeout=15)
            assert version_of(await client.read_text()) == 2
        assert server.process.poll() is None and updater.process.poll() is None
    finally:
        server.stop()
        updater.stop()
        if redis is not None:
            redis.stop()


async def test_relay_delivers_an_update_it_missed_when_it_resubscribes(lab, redis_client) -> None:
    server, url = await lab.aserver(update_delay_seconds="600")
    async with connect(url, "reconciled") as client:
        await client.session.subscribe_resource(STATUS_URI)
        line = await server.await_line(r"\[initialize\] .*client=reconciled/")
        session = line.split("session=")[1].split()[0]
        # An update whose publish the relay never hears: the state moves on,
        # and the relay's pub/sub connection is cut before anything is published.
        redis_client.hset(
            contract.state_key(session, STATUS_URI),
            mapping={"version": 2, "text": "status: reviewed\nversion: 2\nmessage: by hand"},
        )
        mark = server.mark()
        assert redis_client.client_kill_filter(_type="pubsub") >= 1
        await server.await_line(r"\[relay\] subscribed", since=mark)
        await server.await_line(
            r"\[relay\] reconciled uri=test://review/status version=2 ", since=mark
        )
        assert await client.wait_updated(1, timeout=10) == [STATUS_URI]
        assert version_of(await client.read_text()) == 2
        # Told once: a further gap does not repeat it.
        mark = server.mark()
        redis_client.client_kill_filter(_type="pubsub")
        await server.await_line(r"\[relay\] reconcile checked=1 notified=0", since=mark)
        assert server.matching(r"\[relay\] reconciled", since=mark) == []


async def test_relay_sends_a_list_changed_it_missed_when_it_resubscribes(lab, redis_client) -> None:
    server, url = await lab.aserver(update_delay_seconds="600", scenario="list-changed")
    async with connect(url, "relisted") as client:
        await client.session.subscribe_resource(STATUS_URI)
        line = await server.await_line(r"\[initialize\] .*client=relisted/")
        session = line.split("session=")[1].split()[0]
        # The scenario's second resource is listed while the relay cannot hear it.
        mark = server.mark()
        assert redis_client.client_kill_filter(_type="pubsub") >= 1
        redis_client.sadd(contract.listed_key(session), REVIEW_NOTES.uri)
        await server.await_line(r"\[relay\] subscribed", since=mark)
        await server.await_line(
            rf"\[relay\] reconciled list_changed uri={REVIEW_NOTES.uri} session={session} ",
            since=mark,
        )
        assert await client.wait_list_changed(1, timeout=10) == 1
        listed = await client.session.list_resources()
        assert REVIEW_NOTES.uri in [str(r.uri) for r in listed.resources]
        # Told once: a further gap does not repeat it.
        mark = server.mark()
        redis_client.client_kill_filter(_type="pubsub")
        await server.await_line(
            r"\[relay\] reconcile checked=1 notified=0 list_changed=0", since=mark
        )
        assert server.matching(r"\[relay\] reconciled", since=mark) == []
        assert client.list_changed == 1
