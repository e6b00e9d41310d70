"""Reading the evidence record back: runs, events, and their validation.

The record is the stream ``mcp:events``; observation runs are delimited by
entries of ``mcp:runs`` (see :mod:`mcp_lab.evidence.recorder` for the writing side).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from mcp_lab import contract, logs, state

logger = logging.getLogger("mcp_lab.evidence")

_READ_PAGE = 1000


# A run's id is a boundary in ``mcp:events``: every event recorded before the run
# began has a smaller id, every event after it a larger one. Ids of two streams are
# not ordered within one millisecond (each stream counts its own sequence), so the
# run id is chosen above the events' last id (and the last run's, and now) and the
# events stream is told to go on above it (XSETID).
#
# A run remembers the scenario it is played under (field ``scenario``): a report of
# it is scored in that scenario, whatever the lab plays when the report is made.
# KEYS: mcp:events, mcp:runs, mcp:scenario.
_NEW_RUN = """
local function scenario_now()
  local played = redis.pcall('GET', KEYS[3])
  if type(played) == 'string' then return played end
  return nil
end
local function new_run(fields)
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local seq = 0
  local function above(id)
    local ims, iseq = string.match(id, '^(%d+)-(%d+)$')
    ims, iseq = tonumber(ims), tonumber(iseq)
    if ims > ms or (ims == ms and iseq >= seq) then ms, seq = ims, iseq + 1 end
  end
  local events = redis.call('EXISTS', KEYS[1]) == 1
  if events then
    local info = redis.call('XINFO', 'STREAM', KEYS[1])
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then above(info[i + 1]) end
    end
  end
  local last_run = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
  if #last_run > 0 then above(last_run[1][1]) end
  local id = string.format('%.0f-%.0f', ms, seq)
  if events then redis.call('XSETID', KEYS[1], id) end
  return redis.call('XADD', KEYS[2], id, unpack(fields))
end
"""

# ``mcp-lab reset``: a new run, played under the scenario the lab plays now.
_START_RUN = (
    _NEW_RUN
    + """
local fields = {'reason', ARGV[1]}
local played = scenario_now()
if played then
  table.insert(fields, 'scenario')
  table.insert(fields, played)
end
return new_run(fields)
"""
)

# A server starts playing ARGV[1]: ``mcp:scenario`` says so, and when the current
# run was played under another scenario (its own field; for a run that has none, or
# before any run, the one ``mcp:scenario`` named), a new run begins, so that no run
# mixes two scenarios. Returns {run id, the scenario played before}, or false.
_PLAY_SCENARIO = (
    _NEW_RUN
    + """
local before = scenario_now()
redis.call('SET', KEYS[3], ARGV[1])
local played = before
local last_run = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #last_run > 0 then
  local fields = last_run[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'scenario' then played = fields[i + 1] end
  end
end
if played == nil or played == ARGV[1] then return false end
local id = new_run({'reason', 'scenario', 'scenario', ARGV[1], 'previous_scenario', played})
return {id, played}
"""
)

_RUN_KEYS = (contract.EVENTS_STREAM, contract.RUNS_STREAM, contract.SCENARIO_KEY)
# The fields of a run entry that name a scenario (longer values are not the lab's).
_SCENARIO_FIELD, _PREVIOUS_FIELD = b"scenario", b"previous_scenario"
_SCENARIO_NAME_CHARS = 200


async def start_run(redis: Redis) -> str:
    """Begin a new observation run; returns its id, which parts the events recorded
    before it from those after it even within one millisecond. The run records the
    scenario the lab plays (``mcp:scenario``), which scores it from then on."""
    run_id = await redis.eval(_START_RUN, len(_RUN_KEYS), *_RUN_KEYS, "reset")
    return run_id.decode() if isinstance(run_id, bytes) else cast(str, run_id)


async def play_scenario(redis: Redis, name: str) -> tuple[str, str] | None:
    """A server starts playing scenario ``name``: ``mcp:scenario`` is set to it, and
    when the current run was played under another scenario a new run begins (states
    are left as they are). Returns (the new run's id, the scenario played before), or
    None when the current run already plays ``name`` (or nothing was played yet)."""
    # Read undecoded: the scenario played before comes from a run entry anyone may write.
    began = await state.read_raw(redis, "EVAL", _PLAY_SCENARIO, len(_RUN_KEYS), *_RUN_KEYS, name)
    if not began:
        return None
    run_id, before = began
    return run_id.decode(), bytes(before).decode("utf-8", "replace")


async def run_scenario(redis: Redis, run_id: str) -> str | None:
    """The name of the scenario run ``run_id`` was played under, as the run recorded it;
    None for a run that recorded none (begun before runs remembered their scenario,
    or written by someone else). Run ``0-0`` (everything before the first run) was
    played under what the first run names as played before it."""
    if run_id == "0-0":
        entries = await state.read_raw(redis, "XRANGE", contract.RUNS_STREAM, "-", "+", "COUNT", 1)
        wanted: tuple[bytes, ...] = (_PREVIOUS_FIELD, _SCENARIO_FIELD)
    else:
        entries = await state.read_raw(redis, "XRANGE", contract.RUNS_STREAM, run_id, run_id)
        wanted = (_SCENARIO_FIELD,)
    if not entries:
        return None
    fields = entries[0][1] or {}
    for name in wanted:
        value = fields.get(name)
        if isinstance(value, bytes) and 0 < len(value) <= _SCENARIO_NAME_CHARS:
            try:
                return value.decode()
            except UnicodeDecodeError:
                return None
    return None


async def run_bounds(redis: Redis, run_id: str | None) -> tuple[str, str, str]:
    """(run id, first event id, last event id) of ``run_id``, or of the current run.

    Before any ``mcp-lab reset`` the current run is everything recorded so far,
    with id ``0-0``. Only entry ids of ``mcp:runs`` are read, never their fields,
    so whatever else was written there does not matter.
    """
    if run_id is None:
        latest = await _raw_ids(redis, "XREVRANGE", contract.RUNS_STREAM, "+", "-", "COUNT", 1)
        return (latest[0], latest[0], "+") if latest else ("0-0", "-", "+")
    if not contract.is_event_id(run_id):
        raise LookupError(f"no run with id {run_id!r}: a run id looks like 1767225600000-0")
    found = await _raw_ids(redis, "XRANGE", contract.RUNS_STREAM, run_id, run_id)
    if not found and run_id != "0-0":
        raise LookupError(f"no run with id {run_id!r}")
    following = await _raw_ids(redis, "XRANGE", contract.RUNS_STREAM, f"({run_id}", "+", "COUNT", 1)
    end = f"({following[0]}" if following else "+"
    return run_id, run_id if found else "-", end


async def _raw_ids(redis: Redis, *command: str | int) -> list[str]:
    """The entry ids of an XRANGE/XREVRANGE reply (fields left undecoded)."""
    return [entry_id.decode() for entry_id, _ in await state.read_raw(redis, *command)]


async def last_event_id(redis: Redis) -> str:
    """Id of the newest entry of ``mcp:events`` (``0-0`` when there is none); its
    fields are not decoded, so an entry anyone else wrote cannot make this fail."""
    ids = await _raw_ids(redis, "XREVRANGE", contract.EVENTS_STREAM, "+", "-", "COUNT", 1)
    return ids[0] if ids else "0-0"


async def wait_for_events(redis: Redis, after: str, block_ms: int) -> str | None:
    """Wait up to ``block_ms`` for entries of ``mcp:events`` past ``after``: the id of
    the newest one, or None when none came (fields not decoded, as above)."""
    reply = await state.read_raw(
        redis, "XREAD", "BLOCK", block_ms, "STREAMS", contract.EVENTS_STREAM, after
    )
    if not reply:
        return None
    newest: bytes = reply[0][1][-1][0]
    return newest.decode()


async def read_events(redis: Redis, first: str, last: str = "+") -> list[contract.Event]:
    """Every well-formed event recorded between two stream ids (inclusive).

    Entries are read undecoded and checked one at a time: one that anyone else
    wrote (a field that is not UTF-8, a missing field, a value the lab never
    records) is left out, and one warning per read says how many and shows the
    first. ``redis`` may decode replies or not.
    """
    events: list[contract.Event] = []
    skipped = _Skipped()
    start = first
    while True:
        page = await state.read_raw(
            redis, "XRANGE", contract.EVENTS_STREAM, start, last, "COUNT", _READ_PAGE
        )
        for entry_id, raw in page:
            try:
                events.append(parse_event(raw))
            except contract.BadMessage as exc:
                skipped.add(entry_id, str(exc), raw)
        if len(page) < _READ_PAGE:
            break
        start = f"({page[-1][0].decode()}"
    skipped.log()
    return events


async def read_recent_events(
    redis: Redis, first: str, last: str, limit: int
) -> tuple[list[contract.Event], bool]:
    """The newest ``limit`` entries recorded between two stream ids (inclusive), as
    events in order (malformed ones left out, as :func:`read_events` does), and
    whether older entries of that range were left out: a read of bounded size,
    however long the run."""
    entries: list[tuple[bytes, dict[bytes, bytes] | None]] = []
    end = last
    while len(entries) <= limit:
        wanted = min(_READ_PAGE, limit + 1 - len(entries))
        page = await state.read_raw(
            redis, "XREVRANGE", contract.EVENTS_STREAM, end, first, "COUNT", wanted
        )
        entries.extend(page)
        if len(page) < wanted:
            break
        end = f"({page[-1][0].decode()}"
    cut = len(entries) > limit
    events: list[contract.Event] = []
    skipped = _Skipped()
    for entry_id, raw in reversed(entries[:limit]):
        try:
            events.append(parse_event(raw))
        except contract.BadMessage as exc:
            skipped.add(entry_id, str(exc), raw)
    skipped.log()
    return events, cut


# datetime cannot show a time past the year 9999; the lab never records one.


def parse_event(raw: dict[bytes, bytes] | None) -> contract.Event:
    """One raw entry of ``mcp:events``; raises :class:`contract.BadMessage` with a short
    reason for anything the lab would not have recorded."""
    if not raw:
        raise contract.BadMessage("no fields")
    fields: dict[str, str] = {}
    for key, value in raw.items():
        try:
            fields[key.decode()] = value.decode()
        except UnicodeDecodeError as exc:
            raise contract.BadMessage(f"field {logs.shown(key)} is not UTF-8") from exc
    return contract.Event.from_fields(fields)


class _Skipped:
    """The entries a read left out: counted, the first one kept for the log line."""

    def __init__(self) -> None:
        self.count = 0
        self._first = ""

    def add(self, entry_id: bytes, reason: str, raw: dict[bytes, bytes] | None) -> None:
        if not self.count:
            fields = logs.shown_fields(raw or {})
            self._first = f"{entry_id.decode()}: {reason} (fields={fields})"
        self.count += 1

    def log(self) -> None:
        if self.count:
            logger.warning(
                "[evidence] left out %d malformed entr%s of %s; first %s",
                self.count,
                "y" if self.count == 1 else "ies",
                contract.EVENTS_STREAM,
                self._first,
            )


async def lost_in_range(redis: Redis, first: str, last: str) -> int:
    """How many events were lost between two ``mcp:events`` ids, as
    :func:`mcp_lab.evidence.reader.run_bounds` gives them (``-``, ``+``, ``(id``)."""
    start = None if first == "-" else contract.entry_time_ms(first.lstrip("("))
    end = None if last == "+" else contract.entry_time_ms(last.lstrip("("))
    return await lost_between(redis, start, end)


@dataclass
class SessionLoss:
    """A session's evidence the lab could not record (its store unavailable)."""

    count: int
    first_ms: int
    last_ms: int

    def note(self) -> str:
        """What the session's row says of it."""
        # The lost events' span: the outage lasted at least that long.
        seconds = round((self.last_ms - self.first_ms) / 1000)
        span = f"for at least {seconds} s" if seconds >= 1 else "for a moment"
        return (
            f"the lab's store was unavailable {span}: this verdict may be incomplete "
            f"({self.count} event(s) of this session not recorded)"
        )


async def lost_by_session(
    redis: Redis, start_ms: int | None, end_ms: int | None
) -> dict[str, SessionLoss]:
    """Per session, the events recorded as lost (``contract.EVENTS_LOST_STREAM``, its
    entries' ``sessions``) between two times (None: unbounded), each gap's time span
    taken for all the sessions it names. Entries that do not parse are skipped."""
    found: dict[str, SessionLoss] = {}
    for _, fields in await state.read_raw(redis, "XRANGE", contract.EVENTS_LOST_STREAM, "-", "+"):
        try:
            first, last = int(fields[b"first_ms"]), int(fields[b"last_ms"])
            named = json.loads(fields.get(b"sessions", b"{}"))
        except (KeyError, ValueError, TypeError):
            continue
        if not isinstance(named, dict):
            continue
        if not ((start_ms is None or last >= start_ms) and (end_ms is None or first < end_ms)):
            continue
        for session, count in named.items():
            if not isinstance(session, str) or not isinstance(count, int) or count <= 0:
                continue
            had = found.get(session)
            if had is None:
                found[session] = SessionLoss(count, first, last)
            else:
                had.count += count
                had.first_ms, had.last_ms = min(had.first_ms, first), max(had.last_ms, last)
    return found


async def lost_between(redis: Redis, start_ms: int | None, end_ms: int | None) -> int:
    """How many events recorded as lost (``contract.EVENTS_LOST_STREAM``) fell between two times
    (None: unbounded). Entries anyone else wrote there are skipped."""
    total = 0
    for _, fields in await state.read_raw(redis, "XRANGE", contract.EVENTS_LOST_STREAM, "-", "+"):
        try:
            count = int(fields[b"count"])
            first, last = int(fields[b"first_ms"]), int(fields[b"last_ms"])
        except (KeyError, ValueError, TypeError):
            continue
        if (start_ms is None or last >= start_ms) and (end_ms is None or first < end_ms):
            total += max(count, 0)
    return total
