"""Operations on the lab's Redis state, shared by the server, the updater and the CLI.

Key names and formats come from :mod:`mcp_lab.contract`; this module only
performs the reads and writes. The update jobs (queueing them, and the scripts
that apply them) are in :mod:`mcp_lab.state_jobs`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.client import NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from mcp_lab import contract, logs

logger = logging.getLogger("mcp_lab.state")

# Runs the commands a function adds to a pipeline and returns their replies (or
# raises the first error): :meth:`mcp_lab.process.writer.BatchWriter.submit`, which puts
# them in its next batch.
Batched = Callable[[Callable[[Pipeline], int]], Awaitable[list[Any]]]

# The longest version a state may hold. The update script (state_jobs._APPLY_JOBS)
# counts in Lua numbers (doubles, written with 14 significant digits), so past 13
# digits a bumped version would be written as "1e+14".
MAX_VERSION_DIGITS = 13


# Connections one client may open, and how long a command waits for one when all
# are busy (then it fails with "No connection available."). The server passes its
# settings (MCP_TEST_REDIS_MAX_CONNECTIONS, MCP_TEST_REDIS_POOL_TIMEOUT_SECONDS).
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_POOL_TIMEOUT_SECONDS = 20.0
# How long opening one connection may take. A burst opens a pool's worth at once
# (three replicas: up to 300 connects to one Redis); at 5 s a loaded machine
# refused 87 of 1,000 subscribes with "Timeout connecting to server"
# (docs/performance.md, "Several replicas"). A Redis that is down refuses the
# connection at once, so this bound is only reached by a slow or unreachable one.
CONNECT_TIMEOUT_SECONDS = 15.0


class StoreUnavailable(RedisError):
    """Redis work refused or cut short because the lab's store does not answer (the
    server's probe found it so: mcp_lab.server.store_health). A client's request gets
    it as its error; being the outage's, not the request's, it is not logged per
    request (the outage has one log line as it starts and one as it ends)."""


def connect(
    url: str,
    socket_timeout: float | None = 10,
    decode: bool = True,
    reconnect: bool = True,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT_SECONDS,
) -> Redis:
    """A client for ``url`` with bounded connect and reply times (``socket_timeout=None``
    for a connection that blocks on pub/sub). Replies are str, or bytes with
    ``decode=False`` for reading what anyone may have written (a payload that is not
    UTF-8 must be one bad message, not an error inside the client). ``reconnect=False``
    for pub/sub: redis-py would otherwise resubscribe behind the relay's back, and the
    relay must know of every gap to reconcile after it.

    The client's pool holds at most ``max_connections``; when all are in use a
    command waits up to ``pool_timeout`` seconds for one (redis-py's default pool
    fails at once with "Too many connections", which refused a burst of clients)."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_timeout,
        decode_responses=decode,
        socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        socket_timeout=socket_timeout,
        health_check_interval=15,
        retry=_reconnect_retry() if reconnect else None,
    )
    return Redis.from_pool(pool)


def _reconnect_retry() -> Retry:
    """Retry a command that met a closed connection, on a new one.

    After a Redis restart every pooled connection is dead, and redis-py (no
    retries by default) fails the first command on each: a missed update was
    then never reconciled. Connection errors are retried; timeouts are not (a
    command that timed out has probably run). A connection lost after a command
    ran but before its reply would run it twice: harmless for the update script
    (its XACK guard applies a job once), a duplicate entry for a plain XADD.
    """
    return Retry(
        ExponentialBackoff(cap=0.5, base=0.05), 2, supported_errors=(RedisConnectionError,)
    )


async def read_raw(redis: Redis, *command: str | int) -> Any:
    """The reply to a read ``command``, undecoded (bytes) whatever the client's
    ``decode_responses``: a value that is not UTF-8 is then the caller's to judge,
    not an error raised inside the client for the whole reply."""
    return await redis.execute_command(*command, **{NEVER_DECODE: []})


def parse_version(raw: bytes | None) -> int | None:
    """A stored version: a positive integer of at most ``MAX_VERSION_DIGITS`` ASCII
    digits (what the update script accepts too), else None."""
    if raw is None or not raw.isdigit() or len(raw) > MAX_VERSION_DIGITS:
        return None
    version = int(raw)
    return version if version >= 1 else None


async def read_state(
    redis: Redis, scope: str, uri: str, initial_text: str, *, batch: Batched | None = None
) -> tuple[int, str]:
    """Version and text of ``uri`` for ``scope``; version 1 and ``initial_text`` (the
    resource's text at version 1, see :meth:`mcp_lab.catalog.ResourceSpec.initial`)
    when nothing was written yet. With ``batch`` the read goes into its next
    pipeline instead of taking a connection of the pool.

    A state the lab did not write (anyone with redis-cli can) never fails the read:
    a version that is not a positive integer, a missing text, or a key that is not
    a hash read as version 1, which is also what the next update starts from (it
    replaces the state); a text that is not UTF-8 is served with U+FFFD in place of
    the bad bytes. Each such read logs one warning naming the key.
    """
    key = contract.state_key(scope, uri)
    try:
        if batch is None:
            version, text = await read_raw(redis, "HMGET", key, "version", "text")
        else:

            def hmget(pipe: Pipeline) -> int:
                pipe.execute_command("HMGET", key, "version", "text", **{NEVER_DECODE: []})
                return 1

            (version, text), *_ = await batch(hmget)
    except ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        return _unreadable_state(key, "it is not a hash", initial_text)
    if version is None and text is None:
        return 1, initial_text
    parsed = parse_version(version)
    if parsed is None:
        shown = "missing" if version is None else logs.shown(version)
        reason = f"version {shown} is not a positive integer of {MAX_VERSION_DIGITS} digits at most"
        return _unreadable_state(key, reason, initial_text)
    if text is None:
        return _unreadable_state(key, "it has no text", initial_text)
    try:
        return parsed, text.decode()
    except UnicodeDecodeError:
        logger.warning(
            "[lab] state %s: text %s is not UTF-8; served with U+FFFD for the bad bytes",
            logs.shorten(key),
            logs.shown(text),
        )
        return parsed, text.decode(errors="replace")


def _unreadable_state(key: str, reason: str, initial_text: str) -> tuple[int, str]:
    logger.warning(
        "[lab] state %s is not the lab's (%s): read as version 1 until the next update "
        "replaces it (`mcp-lab reset` deletes it)",
        logs.shorten(key),
        reason,
    )
    return 1, initial_text


async def read_version(redis: Redis, scope: str, uri: str) -> int:
    """The version of ``uri`` for ``scope``, read as :func:`read_state` reads it."""
    version, _ = await read_state(redis, scope, uri, initial_text="")
    return version


def forget_subscriber_in(
    pipe: Pipeline,
    sessions: list[str],
    uris: list[str],
    *,
    replica: str | None = None,
    kept_events: bool = False,
) -> int:
    """Add to ``pipe`` what forgetting subscribers writes, the one place it is written
    (an unsubscribe, a session's end, a dead replica's sweep): ``sessions`` out of the
    subscriber sets of ``uris``; out of ``replica``'s sessions, when given; their kept
    events and owner keys deleted, with ``kept_events``. Returns how many commands."""
    if not sessions:
        return 0
    added = 0
    for uri in uris:
        pipe.srem(contract.subscribers_key(uri), *sessions)
        added += 1
    if replica is not None:
        pipe.srem(contract.replica_sessions_key(replica), *sessions)
        added += 1
    if kept_events:
        for session in sessions:
            pipe.delete(contract.resume_key(session), contract.session_owner_key(session))
            added += 1
    return added


def forget_states_in(pipe: Pipeline, session: str, uris: set[str]) -> int:
    """Add to ``pipe`` the deletion of an ended session's own states (session scope):
    its state of each of ``uris`` and its listed resources. Returns how many commands."""
    keys = [contract.state_key(session, uri) for uri in sorted(uris)]
    pipe.delete(*keys, contract.listed_key(session))
    return 1


def subscribe_in(
    pipe: Pipeline, uri: str, session: str, replica: str, jobs: list[contract.UpdateJob]
) -> int:
    """Add to ``pipe`` what a subscribe writes: ``session`` in the subscriber set of
    ``uri`` and in ``replica``'s sessions, then each of ``jobs`` on the job stream
    (the last replies are their entry ids). Returns how many commands were added."""
    pipe.sadd(contract.subscribers_key(uri), session)
    pipe.sadd(contract.replica_sessions_key(replica), session)
    for job in jobs:
        fields: dict[Any, Any] = job.fields()  # redis-py's parameter type is invariant
        pipe.xadd(contract.JOBS_STREAM, fields)
    return 2 + len(jobs)


async def store_epoch(redis: Redis) -> str:
    """The id of the data Redis holds now (``contract.STORE_EPOCH_KEY``), made if absent:
    a Redis that came back empty has none (or, once another process made it, a new
    one), so a process that noted the id before can tell its data is gone."""
    await redis.set(contract.STORE_EPOCH_KEY, secrets.token_hex(8), nx=True)
    raw = await read_raw(redis, "GET", contract.STORE_EPOCH_KEY)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else ""


async def listed(redis: Redis, scope: str) -> set[str]:
    """The hidden resources a scenario has listed for ``scope`` so far."""
    members: set[bytes] = await read_raw(redis, "SMEMBERS", contract.listed_key(scope))
    return {m.decode("utf-8", "replace") for m in members}


async def reset_states(redis: Redis) -> int:
    """Delete every state (back to version 1), every listed set (hidden resources
    hidden again) and every dropped listen noted (dropped-stream drops again). Returns
    how many keys were deleted."""
    deleted = 0
    for prefix in (
        contract.STATE_KEY_PREFIX,
        contract.LISTED_KEY_PREFIX,
        contract.DROPPED_KEY_PREFIX,
    ):
        async for key in redis.scan_iter(match=f"{prefix}*", count=500):
            deleted += await redis.delete(key)
    return deleted
