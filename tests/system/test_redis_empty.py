"""A Redis that comes back without its data (issue 44, item 4), with real processes.

Redis is SIGKILLed while every session's update waits out its delay, and started
again on the same port with no append-only file and no snapshot: it holds nothing.
The server still holds every session and subscription: it writes them again (the
subscriber sets, the jobs still to come, due when they were due), so every
session is notified once and reads version 2; the updater says the jobs it held
were lost with the store, never "already applied"; ``mcp-lab trigger`` finds the
sessions subscribed, and the report says the store came back empty and what was
restored.
"""

from __future__ import annotations

import json
import re
import signal

import anyio
import pytest
import redis

from mcp_lab import contract
from mcp_lab.evidence import build, report
from mcp_lab.state import connect as redis_connect
from tests.support.faults import BOUND, Rig, many_clients, rig, sessions_of, unique
from tests.support.lab import STATUS_URI, amcp_lab, lab_env, version_of

pytestmark = pytest.mark.anyio

SESSIONS = 20
RESTORED = (
    r"\[lab\] the store \(Redis\) came back without its data \(its epoch is gone\); "
    rf"restored {SESSIONS} subscription\(s\) of {SESSIONS} session\(s\): "
    rf"{SESSIONS} update job\(s\) queued again"
)


def _epoch(lab: Rig) -> str | None:
    with lab.client() as client:
        value = client.get(contract.STORE_EPOCH_KEY)
    return value if isinstance(value, str) else None


async def _all_pending(lab: Rig, count: int) -> list[str]:
    """Wait (bounded) until the updater holds ``count`` jobs; their entry ids."""
    with anyio.fail_after(BOUND):
        while True:
            with lab.client() as client:
                try:
                    pending = client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
                except redis.exceptions.ResponseError:
                    pending = {"pending": 0}
                if int(pending["pending"]) >= count:
                    return [entry_id for entry_id, _ in client.xrange(contract.JOBS_STREAM)]
            await anyio.sleep(0.1)


@pytest.mark.timeout(240)
async def test_redis_back_empty_every_subscribed_session_is_notified() -> None:
    async with rig(delay="10") as lab:
        run = unique("empty")
        names = [f"{run}-{i:02d}" for i in range(SESSIONS)]
        with anyio.fail_after(180):
            async with many_clients(lab.url, names) as clients:
                sessions = await sessions_of(lab.server, names)
                assert [version_of(await c.read_text()) for c in clients] == [1] * SESSIONS
                async with anyio.create_task_group() as group:
                    for client in clients:
                        group.start_soon(client.session.subscribe_resource, STATUS_URI)
                held = await _all_pending(lab, SESSIONS)
                epoch = _epoch(lab)
                assert epoch, "the lab set no store epoch"
                server_mark, updater_mark = lab.server.mark(), lab.updater.mark()

                await lab.restart_redis_empty(signal.SIGKILL)

                await lab.server.await_line(RESTORED, BOUND, since=server_mark)
                assert _epoch(lab) not in (None, epoch)
                # Every session is notified once and reads version 2.
                for client in clients:
                    await client.wait_updated(1, timeout=BOUND)
                assert [version_of(await c.read_text()) for c in clients] == [2] * SESSIONS
                # The jobs the updater held: lost with the store, never "already applied".
                for entry_id in held:
                    lost = rf"\[updater\] job={re.escape(entry_id)} was lost with the store"
                    await lab.updater.await_line(lost, BOUND, since=updater_mark)
                assert not lab.updater.matching(r"already applied", updater_mark)
                applied = lab.updater.matching(r"\[resource/update\] .*version=2 ", updater_mark)
                assert len(applied) == SESSIONS, applied

                # The report: the restart noted, every session subscribed and notified.
                client_redis = redis_connect(lab.redis.url)
                try:
                    built = await build.build(client_redis)
                finally:
                    await client_redis.aclose()
                data = report.to_json(built)
                note = data["store_restarted"]
                assert note and f"restored {SESSIONS} subscription(s) of {SESSIONS}" in note, note
                assert f"note: {note}" in report.to_table(built)
                ours = [c for c in data["clients"] if c["client"] in names]
                assert len(ours) == SESSIONS
                for scored in ours:
                    for session in scored["sessions"]:
                        assert session["checkpoints"]["subscribed"] is not None, session
                        assert session["checkpoints"]["notified"] is not None, session
                        assert "read the resource but never subscribed" not in session["notes"]

                # `mcp-lab trigger` finds every session subscribed.
                done = await amcp_lab(lab_env(lab.redis.url), "trigger", "--json")
                assert done.returncode == 0, done.stdout + done.stderr
                updated = json.loads(done.stdout)["updated"]
                subscribed = {u["scope"] for u in updated if u["subscribed"]}
                assert subscribed == set(sessions.values()), updated
                for client in clients:
                    await client.wait_updated(2, timeout=BOUND)
                await lab.barrier()
                for client in clients:
                    await client.session.send_ping()
                assert all(len(c.updated) == 2 for c in clients)
                shown = r"\[lab\] the store|\[relay\] reconcile|was lost with the store"
                for proc, mark in ((lab.server, server_mark), (lab.updater, updater_mark)):
                    print("\n".join(proc.matching(shown, mark)[:3]))
                print(note)
