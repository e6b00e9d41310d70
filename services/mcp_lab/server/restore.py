"""Giving a Redis that came back without its data the subscriptions this replica holds.

Redis restarted empty (killed and started without its append-only file, an
``--ephemeral`` lab's Redis, a container without its volume) forgets every
subscriber set and every queued job, while the server still holds its sessions
and their subscriptions in memory: nobody would be notified, ``mcp-lab trigger``
would find nobody subscribed, and the report would show sessions that never
subscribed. The store's epoch (``contract.STORE_EPOCH_KEY``, a random id made by
the first server or updater to find it absent) tells: each time the relay has
(re)subscribed it reads the epoch, and one gone or changed since the last look
means the data it was noted with is gone.

The server then writes again, in one transaction, what its subscribes had written
(each session in the subscriber sets and in this replica's sessions, the replica's
heartbeat, the lab's scenario and scope), the states its subscribers were already
told of (a client that read version 2 does not read version 1 again), and the jobs
whose updates had not reached the subscriber yet, each due when it was due at the
subscribe (at once, if that has passed). The updater, which held the lost jobs,
applies none of them (``[updater] job=... was lost with the store``), so each
update is applied once. One evidence record per subscription restored
(``subscription/restored``, scored as its subscribe) and one log line say what
happened; the report notes it (:mod:`mcp_lab.evidence.restarts`).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp_lab import contract, state
from mcp_lab.catalog import VERSION_PLACEHOLDER
from mcp_lab.evidence.recorder import now_ms
from mcp_lab.server.sessions import Subscriber

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from mcp_lab.catalog import Catalog
    from mcp_lab.contract import Peer
    from mcp_lab.evidence.recorder import Recorder
    from mcp_lab.scenarios.scenario import Scenario
    from mcp_lab.server.sessions import SessionRegistry
    from mcp_lab.settings import LabSettings


class Lab(Protocol):
    """What a restore needs of the server's Lab (:class:`mcp_lab.server.service.Lab`),
    named here so that this module does not import the one that imports it."""

    settings: LabSettings
    redis: Redis
    registry: SessionRegistry
    recorder: Recorder
    replica: str
    catalog: Catalog
    scenario: Scenario

    def scope(self, peer: Peer) -> str: ...


logger = logging.getLogger("mcp_lab.server")


@dataclass(slots=True)
class Restored:
    """What one restore wrote: subscriptions, sessions, jobs queued again, states."""

    at_ms: int
    subscriptions: int = 0
    sessions: int = 0
    jobs: int = 0
    states: int = 0


class StoreRestore:
    """The relay's check after each (re)subscribe (:attr:`Relay.on_subscribed`)."""

    def __init__(self, lab: Lab) -> None:
        self._lab = lab
        self._epoch: str | None = None  # the store's epoch at the last look
        self.last: Restored | None = None

    async def check(self) -> None:
        """Note the store's epoch; if it is gone or changed since the last look,
        restore (a Redis error propagates: the relay starts over and looks again)."""
        redis = self._lab.redis
        raw = await state.read_raw(redis, "GET", contract.STORE_EPOCH_KEY)
        found = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None
        if self._epoch is None or found == self._epoch:
            self._epoch = found if found is not None else await state.store_epoch(redis)
            return
        await self.restore(found)

    async def restore(self, found: str | None) -> Restored:
        """Write again what this replica's subscriptions need (one transaction), then
        record and log it."""
        lab = self._lab
        done = Restored(at_ms=now_ms())
        pipe = lab.redis.pipeline(transaction=True)
        settings = lab.settings
        pipe.set(contract.SCENARIO_KEY, settings.scenario, nx=True)
        pipe.set(contract.STATE_SCOPE_KEY, settings.state_scope, nx=True)
        pipe.set(
            contract.replica_heartbeat_key(lab.replica),
            "1",
            ex=settings.replica_heartbeat_seconds,
        )
        held = _one_per_subscription(lab.registry.all_subscribers())
        states: dict[tuple[str, str], int] = {}
        for (session, uri), target in held.items():
            pipe.sadd(contract.subscribers_key(uri), session)
            pipe.sadd(contract.replica_sessions_key(lab.replica), session)
            known = target.known.get(uri, 1)
            scope = lab.scope(target.peer)
            if known > states.get((scope, uri), 1):
                states[(scope, uri)] = known
            done.jobs += self._requeue(pipe, target, uri, scope, done.at_ms)
        for (scope, uri), version in states.items():
            self._write_state(pipe, scope, uri, version)
        done.states = len(states)
        pipe.set(contract.STORE_EPOCH_KEY, found or _new_epoch(), nx=True)
        await pipe.execute()
        self._epoch = await state.store_epoch(lab.redis)
        done.subscriptions = len(held)
        done.sessions = len({session for session, _ in held})
        self.last = done
        logger.warning(
            "[lab] the store (Redis) came back without its data (%s); restored %d "
            "subscription(s) of %d session(s): %d update job(s) queued again, %d state(s) "
            "written again",
            "its epoch is gone" if found is None else "its epoch changed",
            done.subscriptions,
            done.sessions,
            done.jobs,
            done.states,
        )
        await lab.recorder.restored(
            [(t.peer, uri, t.known.get(uri, 1)) for (_, uri), t in held.items()], done.at_ms
        )
        return done

    def _requeue(self, pipe: Any, target: Subscriber, uri: str, scope: str, at_ms: int) -> int:
        """Queue again the jobs of ``target``'s subscribe to ``uri`` that had not
        reached it, each due when it was due then; how many. A job not due yet is
        queued again; of those due, as many updates of ``uri`` as it was told of (its
        version past the one it subscribed at) are taken as applied."""
        lab = self._lab
        known = target.known.get(uri, 1)
        start, since_ms = target.since.get(uri, (known, at_ms))
        told = max(0, known - start)
        listed = target.told_listed or set()
        jobs = lab.scenario.jobs(uri, scope, lab.settings.update_delay_seconds)
        queued = 0
        for job in sorted(jobs, key=lambda j: j.delay or 0.0):
            due_ms = since_ms + (job.delay or 0.0) * 1000
            own = job.action == contract.UPDATE_ACTION and job.uri == uri
            if own and due_ms <= at_ms and told > 0:
                told -= 1  # fell due, and was applied and told before the store was lost
                continue
            if job.action == contract.ADD_ACTION and job.uri in listed:
                pipe.sadd(contract.listed_key(scope), job.uri)
                continue
            if job.uri != uri and job.action == contract.UPDATE_ACTION and due_ms <= at_ms:
                continue  # another resource's update that fell due: not known here
            remaining = max(0.0, (due_ms - at_ms) / 1000)
            fields: dict[Any, Any] = dataclasses.replace(job, delay=remaining).fields()
            pipe.xadd(contract.JOBS_STREAM, fields)
            queued += 1
        return queued

    def _write_state(self, pipe: Any, scope: str, uri: str, version: int) -> None:
        """The state at ``version``, as the update script writes it, unless one exists."""
        lab = self._lab
        key = contract.state_key(scope, uri)
        template = lab.catalog[uri].updated_template(lab.settings.updated_status)
        text = template.replace(VERSION_PLACEHOLDER, str(version), 1)
        pipe.hsetnx(key, "version", str(version))
        pipe.hsetnx(key, "text", text)
        ttl = lab.settings.state_ttl_seconds
        if scope != contract.SHARED_SCOPE and ttl > 0:
            pipe.expire(key, ttl)


def _one_per_subscription(held: list[Subscriber]) -> dict[tuple[str, str], Subscriber]:
    """Per (session, URI) the subscriber that subscribed first (several listen
    streams of one session share its Redis subscription)."""
    out: dict[tuple[str, str], Subscriber] = {}
    for target in held:
        for uri in sorted(target.uris):
            key = (target.peer.session, uri)
            first = out.get(key)
            if first is None or _since(target, uri) < _since(first, uri):
                out[key] = target
    return out


def _since(target: Subscriber, uri: str) -> int:
    return target.since.get(uri, (0, int(time.time() * 1000)))[1]


def _new_epoch() -> str:
    return secrets.token_hex(8)
