"""Update jobs in Redis, shared by the server, the updater and the CLI: the job
stream and its consumer group, queueing a job, the scopes a job bumps, and the two
scripts that apply jobs atomically (acknowledge, change the state, publish). Key
names and formats come from :mod:`mcp_lab.contract`; connecting and reading a
state are :mod:`mcp_lab.state`'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from mcp_lab import contract, logs
from mcp_lab.catalog import VERSION_PLACEHOLDER
from mcp_lab.state import MAX_VERSION_DIGITS, read_raw

logger = logging.getLogger("mcp_lab.state")


# Applies a batch of update jobs of one URI atomically. Each job is acknowledged
# first (only the first caller wins, so a job redelivered after a crash is never
# applied twice); each state of an acknowledged job gets its version bumped and the
# new text; then the updates are published: one message per shared state, and one
# message naming many sessions for the sessions' states (at most ARGV[8] sessions
# and about ARGV[9] bytes each; contract.encode_updates is its form). Because the
# publish happens in the same script as the mutation, no crash can separate them.
# A state the lab did not write counts as version 1, as state.read_state reads it
# (version not a positive integer of at most MAX_VERSION_DIGITS digits, no text,
# a key of another type): it is deleted and the update writes a clean one.
# A job queued by a subscribe (while_subscribed) updates a session's state only if
# the session is still in the URI's subscriber set: one that unsubscribed or left
# (its state keys deleted with it) gets none back.
#   KEYS[1] stream, KEYS[2] the URI's subscriber set, KEYS[3..] state keys
#   ARGV: group, uri, channel, text template, version placeholder, ttl, shared
#         scope name, max sessions per message, max bytes per message, n, then n
#         entry ids of jobs without a state (nobody subscribed: only acknowledged),
#         then per state key: entry id, scope, due (ms since the epoch), while
#         subscribed (1 or 0)
#   A full Redis (maxmemory, noeviction) refuses the script before anything is
#   acknowledged (an OOM error, before the XACK): the job stays pending, and
#   the updater retries it until Redis takes writes again.
#   Returns per state key its new version (0: its job was applied before; -1:
#   acknowledged, not applied, the session no longer subscribed), then per job
#   without a state 1 (acknowledged now) or 0 (applied before).
_APPLY_JOBS = """
-- Redis full: refuse the whole job before its acknowledgement (XACK is let through
-- a full Redis, and a script that has written is let finish), so that it waits.
local room = redis.pcall('SETRANGE', KEYS[1], 0, '')
if type(room) == 'table' and room.err and string.find(room.err, 'OOM command', 1, true) then
  return redis.error_reply("OOM command not allowed when used memory > 'maxmemory'.")
end
local function current_version(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    return 1
  end
  if kind == 'hash' then
    local state = redis.call('HMGET', key, 'version', 'text')
    local v = state[1]
    if v and state[2] and #v <= MAX_VERSION_DIGITS and string.match(v, '^%d+$')
        and tonumber(v) >= 1 then
      return tonumber(v)
    end
  end
  redis.call('DEL', key)
  return 1
end
local acked = {}
local function acknowledge(entry)
  if acked[entry] == nil then
    acked[entry] = redis.call('XACK', KEYS[1], ARGV[1], entry) == 1
    if acked[entry] then
      redis.call('XDEL', KEYS[1], entry)
    end
  end
  return acked[entry]
end
local uri, channel, template, placeholder = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local ttl, shared = tonumber(ARGV[6]), ARGV[7]
local max_sessions, max_bytes = tonumber(ARGV[8]), tonumber(ARGV[9])
local bare = tonumber(ARGV[10])
local batch, bytes = {}, 0
local function flush()
  if #batch > 0 then
    redis.call('PUBLISH', channel, cjson.encode({uri = uri, sessions = batch}))
    batch, bytes = {}, 0
  end
end
-- A subscriber key someone made another type holds no subscriber (as job_targets reads it).
local members_kept = redis.call('TYPE', KEYS[2])['ok'] == 'set'
local out = {}
for i = 3, #KEYS do
  local at = 10 + bare + (i - 3) * 4
  local entry, scope, due = ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  local only_subscribed = ARGV[at + 4] == '1' and scope ~= shared
  if not acknowledge(entry) then
    out[#out + 1] = 0
  elseif only_subscribed and (not members_kept or redis.call('SISMEMBER', KEYS[2], scope) == 0) then
    out[#out + 1] = -1
  else
    local version = current_version(KEYS[i]) + 1
    local cut = string.find(template, placeholder, 1, true)
    local text = string.sub(template, 1, cut - 1) .. version
      .. string.sub(template, cut + #placeholder)
    redis.call('HSET', KEYS[i], 'version', version, 'text', text)
    if scope == shared then
      redis.call('PERSIST', KEYS[i])
      redis.call('PUBLISH', channel, cjson.encode({uri = uri, version = version, due = due}))
    else
      if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
      local size = #scope + 32
      if #batch >= max_sessions or bytes + size > max_bytes then
        flush()
      end
      batch[#batch + 1] = {scope, version, due}
      bytes = bytes + size
    end
    out[#out + 1] = version
  end
end
flush()
for i = 1, bare do
  out[#out + 1] = acknowledge(ARGV[10 + i]) and 1 or 0
end
return out
""".replace("MAX_VERSION_DIGITS", str(MAX_VERSION_DIGITS))
# A batched message's bytes, about: kept well under contract.MAX_MESSAGE_BYTES.
_MESSAGE_BYTES = 16 * 1024


# Applies one ADD job atomically (see _APPLY_JOB for the acknowledgement): the
# resource joins each target scope's listed set, and one "listed" message per scope
# is published (the relay sends list_changed).
#   KEYS[1] stream, KEYS[2..] listed keys
#   ARGV: group, entry id, uri, channel, ttl, shared scope name, then one scope per key
_APPLY_ADD = """
-- Redis full: refuse the whole job before its acknowledgement (XACK is let through
-- a full Redis, and a script that has written is let finish), so that it waits.
local room = redis.pcall('SETRANGE', KEYS[1], 0, '')
if type(room) == 'table' and room.err and string.find(room.err, 'OOM command', 1, true) then
  return redis.error_reply("OOM command not allowed when used memory > 'maxmemory'.")
end
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return false
end
redis.call('XDEL', KEYS[1], ARGV[2])
local uri, channel, ttl, shared = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]
for i = 2, #KEYS do
  local scope = ARGV[5 + i]
  redis.call('SADD', KEYS[i], uri)
  local body = {uri = uri, kind = 'listed'}
  if scope ~= shared then
    body['session'] = scope
    if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
  end
  redis.call('PUBLISH', channel, cjson.encode(body))
end
return #KEYS - 1
"""


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
    fields: dict[Any, Any] = job.fields()  # redis-py's parameter type is invariant
    # The server's and the CLI's clients decode replies: the entry id is a str.
    return cast(str, await redis.xadd(contract.JOBS_STREAM, fields))


async def job_targets(redis: Redis, job: contract.UpdateJob, state_scope: str) -> list[str]:
    """The scopes (session ids or ``shared``) whose state ``job`` bumps.

    Members of the subscriber set that are not UTF-8 (no session id is) are left
    out, and a subscriber key that is not a set counts as no subscriber, each with a
    warning: neither can stop the job.
    """
    if state_scope == contract.SHARED_SCOPE:
        # One state for everyone: a job naming a session (``mcp-lab trigger
        # --session``) bumps it too, and every subscribed session is notified.
        return [contract.SHARED_SCOPE]
    if job.target != contract.ALL_SUBSCRIBERS:
        return [job.target]
    if job.action != contract.UPDATE_ACTION:
        return []  # a new resource has no subscribers yet: a session's job names it
    key = contract.subscribers_key(job.uri)
    try:
        members: set[bytes] = await read_raw(redis, "SMEMBERS", key)
    except ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        logger.warning("[updater] %s is not a set: no session counts as subscribed", key)
        return []
    return sorted(_session_ids(key, members))


def _session_ids(key: str, members: set[bytes]) -> list[str]:
    ids: list[str] = []
    bad: list[bytes] = []
    for member in members:
        try:
            ids.append(member.decode())
        except UnicodeDecodeError:
            bad.append(member)
    if bad:
        logger.warning(
            "[updater] %s: left out %d member(s) that are not UTF-8, first %s",
            key,
            len(bad),
            logs.shown(bad[0]),
        )
    return ids


@dataclass(frozen=True, slots=True)
class DueJob:
    """An update job to apply now: its entry id, the scopes whose state it bumps (see
    :func:`job_targets`), and when it was due (ms since the epoch)."""

    entry_id: str
    scopes: list[str]
    due_ms: int
    while_subscribed: bool = False


async def apply_jobs(
    redis: Redis,
    uri: str,
    jobs: list[DueJob],
    *,
    template: str,
    channel: str,
    ttl_seconds: int,
) -> list[list[int | None] | None]:
    """Apply update jobs of ``uri`` once each, in one script: each scope's state becomes
    ``template`` with its new version filled in, and the updates are published (see
    ``_APPLY_JOBS``). Returns per job its new versions (one per scope; None for a
    session no longer subscribed, with ``while_subscribed``), or None for a job
    applied before."""
    keys = [contract.JOBS_STREAM, contract.subscribers_key(uri)]
    bare: list[str] = []
    rows: list[str | int] = []
    for job in jobs:
        if not job.scopes:
            bare.append(job.entry_id)
        for scope in job.scopes:
            keys.append(contract.state_key(scope, uri))
            rows += [job.entry_id, scope, job.due_ms, int(job.while_subscribed)]
    args: list[str | int] = [
        contract.JOBS_GROUP,
        uri,
        channel,
        template,
        VERSION_PLACEHOLDER,
        ttl_seconds,
        contract.SHARED_SCOPE,
        contract.MAX_SESSIONS_PER_MESSAGE,
        _MESSAGE_BYTES,
        len(bare),
        *bare,
        *rows,
    ]
    replies = iter(int(v) for v in await redis.eval(_APPLY_JOBS, len(keys), *keys, *args))
    scoped = [[next(replies) for _ in job.scopes] for job in jobs]
    acked = {entry: next(replies) == 1 for entry in bare}
    out: list[list[int | None] | None] = []
    for job, versions in zip(jobs, scoped, strict=True):
        applied = acked[job.entry_id] if not job.scopes else all(v != 0 for v in versions)
        out.append([v if v > 0 else None for v in versions] if applied else None)
    return out


async def apply_add(
    redis: Redis,
    entry_id: str,
    job: contract.UpdateJob,
    scopes: list[str],
    *,
    channel: str,
    ttl_seconds: int,
) -> bool:
    """Apply an ADD job once: ``job.uri`` is listed for each scope and list_changed
    published. False if it was applied before."""
    keys = [contract.JOBS_STREAM, *(contract.listed_key(s) for s in scopes)]
    args: list[str | int] = [
        contract.JOBS_GROUP,
        entry_id,
        job.uri,
        channel,
        ttl_seconds,
        contract.SHARED_SCOPE,
        *scopes,
    ]
    return await redis.eval(_APPLY_ADD, len(keys), *keys, *args) is not None
