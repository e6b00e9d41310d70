"""Fault injection with real processes: Redis, updater and server stopped mid-flow.

Each test has its own redis-server (append-only file, synced on every write),
server and updater, and a real MCP client. After every fault the client must
end with exactly one ``notifications/resources/updated`` and read version 2;
a barrier job pushed through updater and relay at the end shows that no second
notification was on its way. ``scripts/fault_table.py`` runs this file and
turns the recorded outcomes into the table in ``docs/faults.md``.
"""

from __future__ import annotations

import signal

import anyio
import pytest

from tests.support.faults import BOUND, fault_case, frozen, rig, session_of, unique
from tests.support.lab import STATUS_URI, RawSession, connect, version_of

pytestmark = pytest.mark.anyio

SIGNALS = [pytest.param(signal.SIGKILL, id="SIGKILL"), pytest.param(signal.SIGTERM, id="SIGTERM")]
UPDATE = r"\[resource/update\] uri=test://review/status version=2 scope={session} "


def redis_fault(sig: int) -> str:
    return f"redis-server {signal.Signals(sig).name}, restarted (same port and data)"


@pytest.mark.parametrize("sig", SIGNALS)
async def test_redis_restart_after_read_before_subscribe(sig: int) -> None:
    async with (
        fault_case(redis_fault(sig), "after read of v1, before subscribe", 1) as case,
        rig(delay="0.5") as lab,
    ):
        async with connect(lab.url, unique("redis-a")) as client:
            case.track(client)
            assert version_of(await client.read_text()) == 1
            await lab.restart_redis(sig)

            await client.session.subscribe_resource(STATUS_URI)
            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            await lab.barrier()
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]


@pytest.mark.parametrize("sig", SIGNALS)
async def test_redis_restart_during_the_update_delay(sig: int) -> None:
    async with (
        fault_case(redis_fault(sig), "during the delay (job read, pending)", 1) as case,
        rig(delay="4") as lab,
    ):
        name = unique("redis-b")
        async with connect(lab.url, name) as client:
            case.track(client)
            session = await session_of(lab.server, name)
            mark = lab.updater.mark()
            await client.session.subscribe_resource(STATUS_URI)
            await lab.updater.await_line(r"\[updater\] scheduled job=", BOUND, since=mark)
            assert lab.pending_jobs() == 1, "the job is not pending: stage missed"
            mark = lab.updater.mark()
            await lab.restart_redis(sig)

            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            # Applied once, by the updater that held it through the outage.
            assert len(lab.updater.matching(UPDATE.format(session=session), since=mark)) == 1
            await lab.barrier()
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]
            assert len(lab.updater.matching(UPDATE.format(session=session))) == 1


@pytest.mark.parametrize("sig", SIGNALS)
async def test_redis_down_across_the_due_time(sig: int) -> None:
    """A longer outage: the job falls due while Redis is down, the updater applies
    it as soon as Redis is back, while the relay still waits out its backoff, so
    the publish is heard by no one and only the relay's reconcile can deliver it."""
    stage = "down across the due time (applied while the relay waits to resubscribe)"
    async with fault_case(redis_fault(sig), stage, 1) as case, rig(delay="2") as lab:
        name = unique("redis-d")
        async with connect(lab.url, name) as client:
            case.track(client)
            session = await session_of(lab.server, name)
            mark, server_mark = lab.updater.mark(), lab.server.mark()
            await client.session.subscribe_resource(STATUS_URI)
            await lab.updater.await_line(r"\[updater\] scheduled job=", BOUND, since=mark)
            assert lab.pending_jobs() == 1, "the job is not pending: stage missed"
            await lab.halt_redis(sig)
            await lab.updater.await_line(r"\[updater\] job=\S+ not applied yet", BOUND, since=mark)
            backoff = r"\[relay\] redis unavailable .*retrying in (?:[3-9]|\d\d)\.\ds"  # >= 3 s
            await lab.server.await_line(backoff, BOUND, since=server_mark)
            await lab.redis_back()

            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            assert len(lab.updater.matching(UPDATE.format(session=session))) == 1
            await lab.barrier()
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("relay", ["buffered", "deaf"])
async def test_redis_restart_between_publish_and_delivery(sig: int, relay: str) -> None:
    """The server is frozen (SIGSTOP) while the update is published and Redis
    restarts. ``buffered``: the message waits in the relay's socket. ``deaf``: the
    relay's connection was cut first, so the publish reaches no one and only the
    relay's reconcile after it resubscribes can deliver it."""
    stage = {
        "buffered": "between publish and delivery (message in the frozen relay's socket)",
        "deaf": "between publish and delivery (relay cut off first: publish heard by no one)",
    }[relay]
    async with fault_case(redis_fault(sig), stage, 1) as case, rig(delay="2") as lab:
        name = unique(f"redis-c-{relay}")
        async with connect(lab.url, name) as client:
            case.track(client)
            session = await session_of(lab.server, name)
            mark = lab.updater.mark()
            await client.session.subscribe_resource(STATUS_URI)
            await lab.updater.await_line(r"\[updater\] scheduled job=", BOUND, since=mark)
            server_mark = lab.server.mark()
            with frozen(lab.server):
                assert lab.pending_jobs() == 1, "the update was published already: stage missed"
                if relay == "deaf":
                    with lab.client() as redis:
                        assert redis.client_kill_filter(_type="pubsub") == 1
                await lab.updater.await_line(UPDATE.format(session=session), BOUND, since=mark)
                await lab.restart_redis(sig, server_frozen=True)

            # Thawed, the relay reads what its socket holds, then resubscribes and
            # reconciles: it must notify the session there exactly when it was deaf.
            done = r"\[relay\] reconcile checked=\d+ notified=\d+"
            line = await lab.server.await_line(done, BOUND, since=server_mark)
            notified = 1 if relay == "deaf" else 0
            assert line.endswith(f"checked=1 notified={notified} list_changed=0"), line
            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            await lab.barrier()
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]


UPDATER_KILL = "updater SIGKILL, a new updater started"


async def test_updater_killed_before_it_read_the_job() -> None:
    async with (
        fault_case(UPDATER_KILL, "before it read the job (down when queued)", 1) as case,
        rig(delay="0.5") as lab,
    ):
        lab.updater.kill()
        async with connect(lab.url, unique("updater-a")) as client:
            case.track(client)
            await client.session.subscribe_resource(STATUS_URI)
            assert (lab.queued_jobs(), lab.pending_jobs()) == (1, 0)  # queued, read by no one
            await client.session.send_ping()
            assert client.updated == []

            updater = await lab.astart_updater()
            await updater.await_line(r"\[updater\] scheduled job=\S+ .*in=[\d.]+s$", BOUND)
            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            await lab.barrier()
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]
            assert len(updater.matching(r"\[resource/update\] .*scope=(?!barrier-)")) == 1


async def test_updater_killed_during_the_delay() -> None:
    async with (
        fault_case(UPDATER_KILL, "during the delay (job read, pending)", 1) as case,
        rig(delay="2") as lab,
    ):
        async with connect(lab.url, unique("updater-b")) as client:
            case.track(client)
            await client.session.subscribe_resource(STATUS_URI)
            killed = lab.updater
            await killed.await_line(r"\[updater\] scheduled job=", BOUND)
            killed.kill()
            assert lab.pending_jobs() == 1

            updater = await lab.astart_updater()
            await updater.await_line(r"\[updater\] scheduled job=\S+ .*\(recovered\)", BOUND)
            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            await lab.barrier()
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]
            assert killed.matching(r"\[resource/update\]") == []
            assert len(updater.matching(r"\[resource/update\] .*scope=(?!barrier-)")) == 1


async def test_updater_killed_right_after_the_apply() -> None:
    """Acknowledge, bump and publish are one Lua script: the kill comes after all three."""
    async with (
        fault_case(UPDATER_KILL, "right after the apply (ack+bump+publish: one script)", 1) as case,
        rig(delay="0.5") as lab,
    ):
        name = unique("updater-c")
        async with connect(lab.url, name) as client:
            case.track(client)
            session = await session_of(lab.server, name)
            await client.session.subscribe_resource(STATUS_URI)
            await lab.updater.await_line(UPDATE.format(session=session), BOUND)
            lab.updater.kill()
            assert (lab.queued_jobs(), lab.pending_jobs()) == (0, 0)

            updater = await lab.astart_updater()
            await client.wait_updated(1, timeout=BOUND)
            assert version_of(await client.read_text()) == 2
            await lab.barrier()  # the new updater is past any job it could have redone
            await client.session.send_ping()
            assert client.updated == [STATUS_URI]
            assert updater.matching(r"\[updater\] scheduled .*\(recovered\)") == []
            assert updater.matching(r"\[resource/update\] .*scope=(?!barrier-)") == []
            assert lab.version(session) == 2


@pytest.mark.parametrize("when", ["after the flow", "during the delay"])
async def test_server_killed_and_restarted_on_its_port(when: str) -> None:
    """A restart loses the sessions (404, initialize again), never the data in Redis."""
    old_expected = 1 if when == "after the flow" else 0  # the session dies with the server
    async with (
        fault_case("server SIGKILL, restarted on its port", when, old_expected + 1) as case,
        rig(delay="0.5" if when == "after the flow" else "4") as lab,
    ):
        old_name = unique("server-old")
        with anyio.fail_after(90):
            async with connect(lab.url, old_name) as old:
                case.track(old)
                session = await session_of(lab.server, old_name)
                mark = lab.updater.mark()
                await old.session.subscribe_resource(STATUS_URI)
                if when == "after the flow":
                    await old.wait_updated(1, timeout=BOUND)
                    assert version_of(await old.read_text()) == 2
                else:
                    await lab.updater.await_line(r"\[updater\] scheduled job=", BOUND, since=mark)
                    assert lab.pending_jobs() == 1, "the job was applied already: stage missed"
                lab.server.kill()
                server = await lab.astart_server()  # the same port
                ready = lab.updater.mark()

                raw = RawSession(lab.url)
                try:
                    raw.session_id = session
                    status, _ = await raw.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
                finally:
                    await raw.close()
                assert status == 404

                # The update still lands in the old session's state; nobody holds it now.
                await lab.updater.await_line(UPDATE.format(session=session), BOUND, since=mark)
                assert lab.version(session) == 2
                if lab.updater.matching(UPDATE.format(session=session), since=ready):
                    # Published after the new relay subscribed: it hears it, and has no one.
                    await server.await_line(
                        rf"\[relay\] no subscribed session here .*session={session}$", BOUND
                    )

        new_name = unique("server-new")
        async with connect(lab.url, new_name) as new:
            case.track(new)
            assert await session_of(server, new_name) != session
            assert version_of(await new.read_text()) == 1
            await new.session.subscribe_resource(STATUS_URI)
            await new.wait_updated(1, timeout=BOUND)
            assert version_of(await new.read_text()) == 2
            await lab.barrier()
            await new.session.send_ping()
            assert new.updated == [STATUS_URI]
        assert old.updated == [STATUS_URI] * old_expected
        assert lab.version(session) == 2
