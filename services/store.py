"""Operations on the lab's Redis state, shared by the server, the updater and the CLI.

Key names and formats come from :mod:`services.contract`; this module only
performs the reads and writes.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from services import contract

# Applies one job atomically: acknowledge it (only the first caller wins, so a
# job redelivered after a crash is never applied twice), bump each target's
# version, write the new text, and publish one message per target. Because the
# publish happens in the same script as the mutation, no crash can separate them.
#   KEYS[1] stream, KEYS[2..] state keys
#   ARGV: group, entry id, uri, channel, text template, version placeholder,
#         ttl, shared scope name, then one scope per state key
_APPLY_JOB = """
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return false
end
redis.call('XDEL', KEYS[1], ARGV[2])
local uri, channel, template, placeholder = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ttl, shared = tonumber(ARGV[7]), ARGV[8]
local versions = {}
for i = 2, #KEYS do
  local scope = ARGV[7 + i]
  local version = tonumber(redis.call('HGET', KEYS[i], 'version') or '1') + 1
  local at = string.find(template, placeholder, 1, true)
  local text = string.sub(template, 1, at - 1) .. version .. string.sub(template, at + #placeholder)
  redis.call('HSET', KEYS[i], 'version', version, 'text', text)
  local body = {uri = uri, version = version}
  if scope == shared then
    redis.call('PERSIST', KEYS[i])
  else
    body['session'] = scope
    if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
  end
  redis.call('PUBLISH', channel, cjson.encode(body))
  versions[#versions + 1] = version
end
return versions
"""


def connect(url: str, socket_timeout: float | None = 10, decode: bool = True) -> Redis:
    """A client for ``url`` with bounded connect and reply times (``socket_timeout=None``
    for a connection that blocks on pub/sub). Replies are str, or bytes with
    ``decode=False`` for reading what anyone may have written (a payload that is not
    UTF-8 must be one bad message, not an error inside the client)."""
    return Redis.from_url(
        url,
        decode_responses=decode,
        socket_connect_timeout=5,
        socket_timeout=socket_timeout,
        health_check_interval=15,
    )


async def read_state(redis: Redis, scope: str, uri: str, initial_status: str) -> tuple[int, str]:
    """Version and text of ``uri`` for ``scope``; version 1 when nothing was written yet."""
    values = await redis.hmget(contract.state_key(scope, uri), ["version", "text"])
    version, text = values
    if version is None or text is None:
        return 1, contract.initial_text(initial_status)
    return int(version), text


async def add_subscriber(redis: Redis, uri: str, session: str) -> None:
    """Record that ``session`` is subscribed to ``uri``."""
    await redis.sadd(contract.subscribers_key(uri), session)


async def remove_subscriber(redis: Redis, uri: str, session: str) -> None:
    """Forget the subscription of ``session`` to ``uri``."""
    await redis.srem(contract.subscribers_key(uri), session)


async def ensure_job_group(redis: Redis) -> None:
    """Create the job stream and its consumer group unless they exist.

    The group starts at id 0, so jobs added before the first updater ever ran
    are still delivered to it.
    """
    try:
        await redis.xgroup_create(contract.JOBS_STREAM, contract.JOBS_GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def enqueue_job(redis: Redis, job: contract.UpdateJob) -> str:
    """Add ``job`` to the job stream; returns its entry id."""
    entry_id: str = await redis.xadd(contract.JOBS_STREAM, job.fields())  # type: ignore[arg-type]
    return entry_id


async def job_targets(redis: Redis, job: contract.UpdateJob, state_scope: str) -> list[str]:
    """The scopes (session ids or ``shared``) whose state ``job`` bumps."""
    if job.target != contract.ALL_SUBSCRIBERS:
        return [job.target]
    if state_scope == contract.SHARED_SCOPE:
        return [contract.SHARED_SCOPE]
    members = await redis.smembers(contract.subscribers_key(job.uri))
    return sorted(members)


async def apply_job(
    redis: Redis,
    entry_id: str,
    job: contract.UpdateJob,
    scopes: list[str],
    *,
    updated_status: str,
    channel: str,
    ttl_seconds: int,
) -> list[int] | None:
    """Apply a job once. Returns the new versions, or None if it was applied before."""
    keys = [contract.JOBS_STREAM, *(contract.state_key(s, job.uri) for s in scopes)]
    args = [
        contract.JOBS_GROUP,
        entry_id,
        job.uri,
        channel,
        contract.updated_template(updated_status),
        contract.VERSION_PLACEHOLDER,
        ttl_seconds,
        contract.SHARED_SCOPE,
        *scopes,
    ]
    result = await redis.eval(_APPLY_JOB, len(keys), *keys, *args)  # type: ignore[misc]
    if result is None:
        return None
    return [int(v) for v in result]


async def reset_states(redis: Redis) -> int:
    """Delete every state (back to version 1). Returns how many were deleted."""
    deleted = 0
    async for key in redis.scan_iter(match=f"{contract.STATE_KEY_PREFIX}*", count=500):
        deleted += await redis.delete(key)
    return deleted
