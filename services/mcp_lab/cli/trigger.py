"""``mcp-lab trigger``: a full update now, through the updater, and what it changed.

The job goes on the job stream as a subscribe's would; the command waits until an
updater has applied it, then says which states it bumped, read back from Redis. It
queues nothing when there is nothing to update: nobody subscribed to the URI (no
``--session``) while each session has a state of its own, or a ``--session`` the
lab has never seen (the updater would create a state for the typo). In shared
scope (``MCP_TEST_STATE_SCOPE=shared``) there is always the shared state to update,
subscribed or not. The scope is the running lab's (its server and updater say it in
Redis at start), whatever this command's own environment says.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from mcp_lab import contract, state, state_jobs
from mcp_lab.settings import LabSettings

APPLIED, BAD_ARGUMENT, PENDING, NOTHING_TO_UPDATE = 0, 2, 3, 4
_WAIT_POLL_SECONDS = 0.1
# How far back the evidence is searched for a --session the lab has not kept a state for.
_EVIDENCE_LOOKBACK = 10_000
_SHOWN_SESSIONS = 5


@dataclass(frozen=True)
class TriggerOptions:
    """What ``mcp-lab trigger`` was asked for."""

    uri: str
    session: str | None
    delay: float
    timeout: float
    wait: bool = True
    as_json: bool = False


@dataclass
class Outcome:
    """What the command found and did; printed as text or JSON."""

    status: str
    uri: str
    target: str
    job: str | None = None
    updated: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""

    def show(self, as_json: bool, code: int) -> int:
        if as_json:
            print(json.dumps(self.__dict__, indent=2))
        elif code == APPLIED:
            print(self.message)
        else:
            print(f"mcp-lab: {self.message}", file=sys.stderr)
        return code


async def _subscribers(redis: Redis, uri: str) -> list[str]:
    job = contract.UpdateJob(uri, contract.ALL_SUBSCRIBERS)
    return await state_jobs.job_targets(redis, job, state_scope="session")


async def _in_evidence(redis: Redis, session: str) -> bool:
    """Whether ``session`` is among the last events recorded (a client that only reads)."""
    entries = await state.read_raw(
        redis, "XREVRANGE", contract.EVENTS_STREAM, "+", "-", "COUNT", _EVIDENCE_LOOKBACK
    )
    wanted = session.encode()
    return any(fields.get(b"session") == wanted for _, fields in entries)


async def _known(redis: Redis, session: str, uri: str) -> bool:
    if await redis.exists(contract.state_key(session, uri)):
        return True
    return await _in_evidence(redis, session)


def _listed(sessions: list[str]) -> str:
    if not sessions:
        return "none"
    shown = ", ".join(sessions[:_SHOWN_SESSIONS])
    more = len(sessions) - _SHOWN_SESSIONS
    return f"{shown} and {more} more" if more > 0 else shown


async def _lab_scope(redis: Redis, own: str) -> str:
    """The state scope of the lab behind ``redis``, as its server and updater set it at
    start; ``own`` (this command's settings) when no lab said (one older than the key)."""
    raw = await state.read_raw(redis, "GET", contract.STATE_SCOPE_KEY)
    said = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return said if said in (contract.SHARED_SCOPE, "session") else own


async def _versions(redis: Redis, uri: str, scopes: list[str]) -> dict[str, int]:
    return {scope: await state.read_version(redis, scope, uri) for scope in scopes}


def _applied_message(
    uri: str, updated: list[dict[str, Any]], subscribed: int, session: str | None = None
) -> str:
    if not updated:
        return (
            f"applied, but no state of {uri} changed: the sessions subscribed when it was "
            "queued had left by then"
        )
    lines = []
    for item in updated:
        if item["scope"] == contract.SHARED_SCOPE:
            lines.append(
                f"applied: the shared state of {uri} is now version {item['version']}; "
                f"{subscribed} subscribed session(s) notified through the relay"
            )
            if session is not None:
                lines.append(
                    f"(the lab keeps one state for every session, MCP_TEST_STATE_SCOPE=shared: "
                    f"--session {session} has no state of its own, so every session saw it)"
                )
            continue
        heard = (
            "subscribed: notified through the relay"
            if item["subscribed"]
            else "not subscribed: no notification"
        )
        lines.append(
            f"applied: session {item['scope']} reads version {item['version']} of {uri} ({heard})"
        )
    lines.append("`mcp-lab report` shows what each client did with it.")
    return "\n".join(lines)


async def run(settings: LabSettings, options: TriggerOptions) -> int:
    """Queue the update, wait for it, and say what it changed; returns the exit code."""
    uri, session = options.uri, options.session
    target = session or contract.ALL_SUBSCRIBERS
    redis = state.connect(settings.redis_url)
    try:
        subscribers = await _subscribers(redis, uri)
        shared = await _lab_scope(redis, settings.state_scope) == contract.SHARED_SCOPE
        if session is None and not subscribers and not shared:
            return Outcome(
                "nothing-to-update",
                uri,
                target,
                message=f"nobody is subscribed to {uri}, so there is no session to update "
                "(no job queued): connect a client that subscribes first (`mcp-lab status` "
                "shows the sessions), or name one with --session ID",
            ).show(options.as_json, NOTHING_TO_UPDATE)
        if session is not None and session not in subscribers:
            if not await _known(redis, session, uri):
                return Outcome(
                    "unknown-session",
                    uri,
                    target,
                    message=f"no session {session!r} is known to this lab (not subscribed to "
                    f"{uri}, no state, no evidence), so no job was queued. Subscribed now: "
                    f"{_listed(subscribers)}. Session ids are in the log (session=...) and "
                    "in `mcp-lab status`.",
                ).show(options.as_json, BAD_ARGUMENT)
        # A lab with shared state bumps the shared one even for --session.
        watched = [session] if session else subscribers
        watched = [*watched, contract.SHARED_SCOPE]
        before = await _versions(redis, uri, watched)
        job = contract.UpdateJob(uri=uri, target=target, delay=options.delay)
        await state_jobs.ensure_job_group(redis)
        entry_id = await state_jobs.enqueue_job(redis, job)
        queued = f"queued job {entry_id}: uri={uri} target={target} delay={options.delay}s"
        if not options.wait:
            return Outcome("queued", uri, target, entry_id, message=queued).show(
                options.as_json, APPLIED
            )
        if not options.as_json:
            print(queued, flush=True)
        if not await _applied(redis, entry_id, options.delay + options.timeout):
            return Outcome(
                "pending",
                uri,
                target,
                entry_id,
                message="still pending: is `mcp-lab updater` running against this Redis? "
                "The job stays queued and is applied when an updater starts.",
            ).show(options.as_json, PENDING)
        after = await _versions(redis, uri, watched)
        # subscribed when queued: a client notified by this update may well have
        # re-read and unsubscribed by now
        updated = [
            {"scope": scope, "version": after[scope], "subscribed": scope in subscribers}
            for scope in watched
            if after[scope] != before[scope]
        ]
        message = _applied_message(uri, updated, len(subscribers), session)
        return Outcome("applied", uri, target, entry_id, updated, message).show(
            options.as_json, APPLIED
        )
    finally:
        await redis.aclose()


async def _applied(redis: Redis, entry_id: str, within: float) -> bool:
    """Wait (at most ``within`` seconds) until the job has left the stream: applied."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not await redis.xrange(contract.JOBS_STREAM, entry_id, entry_id):
            return True
        await asyncio.sleep(_WAIT_POLL_SECONDS)
    return False
