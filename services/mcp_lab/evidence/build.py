"""The one report builder: read a run's events, count what was lost, score them in a
scenario. ``mcp-lab report``, the dashboard and the clients runner all build their
reports here; :mod:`mcp_lab.evidence.report` renders one.

It imports neither the MCP SDK nor fastmcp (``mcp-lab report`` stays quick).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from redis.asyncio import Redis

from mcp_lab import contract, state
from mcp_lab.evidence import reader, scoring
from mcp_lab.evidence.levels import ClientScore
from mcp_lab.evidence.scoring import LeftOut
from mcp_lab.evidence.timing import LabTiming
from mcp_lab.evidence.timing import lab_timing as timing_of
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import Scenario

logger = logging.getLogger("mcp_lab.evidence")


@dataclass
class Report:
    """A scored window of evidence: a run (``run_id``) or the events ``since_ms``."""

    run_id: str | None
    since_ms: int | None
    scenario: Scenario
    clients: list[ClientScore]
    missing: int  # events of the window that could not be recorded
    generated_ms: int
    # The window's newest events only were scored (``max_events``): how many at most.
    newest_only: int | None = None
    # Whether the lab sent its notifications when due (timing.lab_timing).
    timing: LabTiming = field(default_factory=lambda: timing_of([]))
    # What the window holds that is no client of it (sessions begun before it,
    # messages without a client's identity): not in ``clients``, counted here.
    left_out: LeftOut = field(default_factory=LeftOut)


async def lab_scenario(redis: Redis, name: str | None = None) -> Scenario:
    """``name``'s scenario; without a name, the one the lab plays (``mcp:scenario``,
    set by the server at start), else the default."""
    if name is not None:
        return registry.get(name)
    raw = await state.read_raw(redis, "GET", contract.SCENARIO_KEY)
    played = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None
    if played is not None and played in registry.names():
        return registry.get(played)
    if played is not None:
        logger.warning("[evidence] the lab plays an unknown scenario %r; scoring as the default",
                       played[:60])  # fmt: skip
    return registry.get(registry.DEFAULT)


async def run_scenario(redis: Redis, run_id: str) -> Scenario:
    """The scenario run ``run_id`` was played under, as the run recorded it; for a run
    that recorded none (older than that record), the one the lab plays now."""
    recorded = await reader.run_scenario(redis, run_id)
    if recorded is not None and recorded in registry.names():
        return registry.get(recorded)
    if recorded is not None:
        logger.warning("[evidence] run %s was played under an unknown scenario %r; scoring it "
                       "in the lab's", run_id, recorded[:60])  # fmt: skip
    return await lab_scenario(redis)


async def build(
    redis: Redis,
    *,
    run: str | None = None,
    since_ms: int | None = None,
    scenario: str | None = None,
    unsaved_lost: int = 0,
    max_events: int | None = None,
) -> Report:
    """The report of ``run`` (the current run when None), or of the events since
    ``since_ms``, scored in ``scenario`` (when None: the one the run was played under,
    or for ``since_ms`` the one the lab plays). ``unsaved_lost``:
    events a running server lost and could not count in Redis yet (added to those
    counted there, for the current run). ``max_events``: score only the window's
    newest events, at most that many (the dashboard's bound). Raises LookupError for
    an unknown run or scenario."""
    asked = None if scenario is None else registry.get(scenario)
    runs: list[str] = []  # resets inside a --since window
    if since_ms is not None:
        run_id, first, last = None, f"{since_ms}-0", "+"
        entries = await state.read_raw(redis, "XRANGE", contract.RUNS_STREAM, first, last)
        runs = [entry_id.decode() for entry_id, _ in entries]
        played = asked if asked is not None else await lab_scenario(redis)
    else:
        run_id, first, last = await reader.run_bounds(redis, run)
        played = asked if asked is not None else await run_scenario(redis, run_id)
    cut = False
    if max_events is None:
        events = await reader.read_events(redis, first, last)
    else:
        events, cut = await reader.read_recent_events(redis, first, last, max_events)
    missing = await reader.lost_in_range(redis, first, last)
    if last == "+":
        missing += unsaved_lost
    scores = scoring.score_window(events, runs, played)
    if missing:  # say it on the rows of the sessions whose evidence was lost
        start = None if first == "-" else contract.entry_time_ms(first.lstrip("("))
        end = None if last == "+" else contract.entry_time_ms(last.lstrip("("))
        losses = await reader.lost_by_session(redis, start, end)
        for client in scores.clients:
            for session in client.sessions:
                loss = losses.get(session.session)
                if loss is not None:
                    session.notes.append(loss.note())
    generated = int(time.time() * 1000)
    return Report(
        run_id,
        since_ms,
        played,
        scores.clients,
        missing,
        generated,
        max_events if cut else None,
        timing_of(events),
        scores.left_out,
    )
