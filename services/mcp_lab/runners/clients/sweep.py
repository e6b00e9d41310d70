"""``mcp-lab clients sweep``: one client over a range of its released versions.

The versions come from npm (``npm view PKG versions --json``), in version order,
prereleases left out unless the range names one. A sweep runs some of them through the
clients runner (:func:`mcp_lab.runners.clients.runner.run_client`, the same rows as ``clients
run``), keeps every row in the history (:mod:`mcp_lab.runners.clients.history`), and reports,
for each scenario and lab setup, the first version at which each checklist answer (the
level, each box, each of the scenario's checks) changed.

Which versions run:

- ``--versions a,b,c``: exactly those; a change is seen at the first of them that has it;
- ``--every N``: every Nth version of the range and its last, then a bisection inside
  each gap whose two ends disagree;
- neither: the two ends of the range, then the bisection (a range of at most
  :data:`RUN_ALL_UP_TO` versions is run whole).

The bisection runs the middle version of a gap and keeps halving the halves whose ends
disagree, down to two neighbours: the later one is where the answer changed. It assumes
that where two versions agree the ones between them do too (an answer that changed and
changed back between two versions run is not seen). A version the runner could not run
(an install that failed, a CLI that never reached the model) says nothing; the
bisection tries the next version in its gap instead, and a change whose gap holds
versions not run is reported as lying between its two ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_lab.runners.clients.matrix import CHECKLIST, ClientRow
from mcp_lab.runners.progress import Progress
from mcp_lab.runners.versions import is_prerelease, version_key

RUN_ALL_UP_TO = 3  # a range this short is run whole
SweepCell = tuple[str, str]  # (scenario, setup)
Runner = Callable[[str], Awaitable[list[ClientRow]]]


def select(versions: list[str], first: str | None = None, last: str | None = None) -> list[str]:
    """The range from ``first`` to ``last`` (both included; by default the whole list),
    prereleases left out unless an end is one. Raises ValueError for an end npm does not
    list."""
    for end in (first, last):
        if end is not None and end not in versions:
            near = [v for v in versions if v.split(".")[:2] == end.split(".")[:2]][:8]
            hint = f" (of that line: {', '.join(near)})" if near else ""
            raise ValueError(f"version {end} is not among the released versions{hint}")
    lo = versions.index(first) if first is not None else 0
    hi = versions.index(last) if last is not None else len(versions) - 1
    if lo > hi:
        raise ValueError(f"--from {first} comes after --to {last}")
    stable = {first, last}
    return [v for v in versions[lo : hi + 1] if not is_prerelease(v) or v in stable]


def verdicts(rows: list[ClientRow]) -> dict[SweepCell, dict[str, str]]:
    """Each row's answers (the level, the protocol negotiated, the checklist, the
    scenario's checks), by scenario and setup; rows the runner failed are left out (they
    say nothing)."""
    out: dict[SweepCell, dict[str, str]] = {}
    for row in rows:
        if row.level is None:
            continue
        answers = {"level": str(row.level), "protocol": row.protocol}
        answers.update({key: check.answer for key, check in row.checklist.items()})
        for check in row.checks:
            answers[f"check:{check.get('title') or check.get('key')}"] = str(check.get("answer"))
        out[(row.scenario, row.setup)] = answers
    return out


def _agree(a: dict[SweepCell, dict[str, str]], b: dict[SweepCell, dict[str, str]]) -> bool:
    return all(a[cell] == b[cell] for cell in a.keys() & b.keys())


@dataclass
class FirstChange:
    """Where one answer of one cell changed."""

    scenario: str
    setup: str
    key: str
    before: str
    after: str
    version: str  # the first version run that has ``after``
    previous: str  # the last version run before it that has ``before``
    exact: bool  # no released version between the two was left unrun (or failed)
    listed: bool = True  # the sweep ran over npm's list (not over versions it was given)

    def text(self) -> str:
        title = CHECKLIST.get(self.key, self.key.removeprefix("check:"))
        if self.exact:
            where = f"first at {self.version}"
        elif not self.listed:
            where = f"first at {self.version} of the versions run (after {self.previous})"
        else:
            where = (
                f"between {self.previous} and {self.version} (the versions between not run, "
                "or failed)"
            )
        return f"{self.scenario} ({self.setup}): {title}: {self.before} -> {self.after}, {where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "setup": self.setup,
            "key": self.key,
            "before": self.before,
            "after": self.after,
            "version": self.version,
            "previous": self.previous,
            "exact": self.exact,
        }


@dataclass
class Sweep:
    """A sweep's versions, what ran, and where each answer changed."""

    client: str
    versions: list[str]  # the range (or the versions asked for)
    bisect: bool
    listed: bool = True  # ``versions`` is npm's list over a range (every release in it)
    rows: dict[str, list[ClientRow]] = field(default_factory=dict)  # by version, in run order
    changes: list[FirstChange] = field(default_factory=list)

    @property
    def ran(self) -> list[str]:
        """The versions run, in version order."""
        return sorted(self.rows, key=version_key)

    def failed(self, version: str) -> bool:
        return not verdicts(self.rows.get(version, []))

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "versions": self.versions,
            "bisect": self.bisect,
            "listed": self.listed,
            "run_order": list(self.rows),
            "ran": self.ran,
            "failed": [v for v in self.ran if self.failed(v)],
            "rows": {v: [r.to_json() for r in self.rows[v]] for v in self.ran},
            "changes": [c.to_json() for c in self.changes],
        }


def sampled(count: int, every: int | None) -> list[int]:
    """The indices run first: every ``every``-th and the last; without ``every``, both
    ends (all of a short range)."""
    if count <= RUN_ALL_UP_TO and every is None:
        return list(range(count))
    step = every if every is not None else max(1, count - 1)
    picks = list(range(0, count, step))
    if picks[-1] != count - 1:
        picks.append(count - 1)
    return picks


async def sweep(
    client: str,
    versions: list[str],
    run: Runner,
    *,
    every: int | None = None,
    bisect: bool = True,
    run_all: bool = False,
    progress: Progress = lambda _: None,
) -> Sweep:
    """Run ``client`` over ``versions`` (in version order) with ``run`` (one version's
    rows; it also keeps them) and find where each answer changed: every version
    (``run_all``), or those :func:`sampled` picks and, with ``bisect``, the bisection."""
    done = Sweep(client, versions, bisect, listed=not run_all)

    async def at(index: int) -> dict[SweepCell, dict[str, str]]:
        version = versions[index]
        if version not in done.rows:
            progress(f"{client} {version}: running (run {len(done.rows) + 1} of this sweep)")
            done.rows[version] = await run(version)
        return verdicts(done.rows[version])

    picks = list(range(len(versions))) if run_all else sampled(len(versions), every)
    for index in picks:
        await at(index)
    if bisect:
        known = [i for i in picks if not done.failed(versions[i])]
        for lo, hi in itertools.pairwise(known):
            await _refine(lo, hi, at, done, versions)
    done.changes = _changes(done, versions)
    return done


async def _refine(
    lo: int,
    hi: int,
    at: Callable[[int], Awaitable[dict[SweepCell, dict[str, str]]]],
    done: Sweep,
    versions: list[str],
) -> None:
    """Halve the gap between ``lo`` and ``hi`` (both run, not failed) while its ends
    disagree."""
    if hi - lo <= 1 or _agree(await at(lo), await at(hi)):
        return
    middle = (lo + hi) // 2
    # The middle first, then outwards: a version that fails gives way to its neighbour.
    candidates = sorted(range(lo + 1, hi), key=lambda i: (abs(i - middle), i))
    for index in candidates:
        if done.failed(versions[index]) and versions[index] in done.rows:
            continue
        await at(index)
        if not done.failed(versions[index]):
            await _refine(lo, index, at, done, versions)
            await _refine(index, hi, at, done, versions)
            return


def _changes(done: Sweep, versions: list[str]) -> list[FirstChange]:
    """Every answer's changes, from one version run (and not failed) to the next."""
    order = {v: i for i, v in enumerate(versions)}
    good = [v for v in done.ran if not done.failed(v)]
    found: list[FirstChange] = []
    for before, after in itertools.pairwise(good):
        a, b = verdicts(done.rows[before]), verdicts(done.rows[after])
        between = versions[order[before] + 1 : order[after]]
        exact = done.listed and not between
        for cell in sorted(a.keys() & b.keys()):
            old, new = a[cell], b[cell]
            for key in [*old, *(k for k in new if k not in old)]:
                if old.get(key, "-") != new.get(key, "-"):
                    was, now = old.get(key, "-"), new.get(key, "-")
                    found.append(
                        FirstChange(*cell, key, was, now, after, before, exact, done.listed)
                    )
    return found


def sweep_table(done: Sweep) -> str:
    ran = done.ran
    if done.listed:
        span = f"{len(done.versions)} released version(s) from {done.versions[0]} to "
        span += f"{done.versions[-1]}, {len(ran)} run"
    else:
        span = f"the {len(done.versions)} version(s) given"
    lines = [
        f"{done.client}: {span}: {', '.join(ran)}" + ("" if done.bisect else " (no bisection)"),
        "",
    ]
    header = ["version", "scenario", "setup", "protocol", "level", *CHECKLIST.values(), "checks"]
    cells = [header]
    for version in ran:
        for row in done.rows[version]:
            if row.level is None:
                cells.append([version, row.scenario, row.setup, row.protocol, f"- {row.no_level}"])
                continue
            boxes = [row.checklist[k].answer if k in row.checklist else "-" for k in CHECKLIST]
            checks = "; ".join(f"{c['title']} {c['answer']}" for c in row.checks) or "-"
            head = [version, row.scenario, row.setup, row.protocol, str(row.level)]
            cells.append([*head, *boxes, checks])
    widths = [max(len(c[i]) for c in cells if i < len(c)) for i in range(len(header))]
    for line in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)).rstrip())
    lines.append("")
    if done.changes:
        lines.append("first changes:")
        lines += [f"  {c.text()}" for c in done.changes]
    else:
        lines.append("no answer changed over the versions run")
    failed = [v for v in ran if done.failed(v)]
    if failed:
        lines.append(f"not run (the runner failed; see their rows): {', '.join(failed)}")
        for version in failed:
            for row in done.rows[version]:
                why = "; ".join(row.notes)[:200]
                lines.append(f"  {version} {row.scenario} ({row.setup}): {why}")
    return "\n".join(lines)
