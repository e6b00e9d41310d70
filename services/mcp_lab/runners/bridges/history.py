"""The bridges matrix's history: every row of ``mcp-lab bridges run``, kept.

A row (:class:`mcp_lab.runners.bridges.verdict.Row`) is one bridge version in one direction
and scenario. Each is kept in the matrix history's file (:mod:`mcp_lab.runners.history_store`,
table ``bridge_verdicts``, beside the clients' ``verdicts``) with the date, the lab's
version, the protocols negotiated, the lab's level, each step's mark and what it rests
on, the notes and the run folders. ``mcp-lab bridges history`` shows, per bridge,
direction and scenario, the marks over versions (in version order, then by date) and
marks every change ("0.16.0: notified passed 1/1 (was dropped 0/1)"; a version that
cannot run the direction, "0.0.22: not supported: ...", and the one after it that can,
"0.1.0: now supported: ..."); the dashboard's
matrix (``/api/matrix``) carries each cell's latest marks with the history behind them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mcp_lab import untrusted
from mcp_lab.runners import history_cells, history_store
from mcp_lab.runners.bridges.verdict import NOT_APPLICABLE, NOT_SUPPORTED, STEPS, Row
from mcp_lab.runners.history_store import history_path, insert, lab_version, now, rows

CELL_ENTRIES = 50  # entries of one cell the dashboard's matrix carries at most
_WHY_CHARS = 100
_COLUMNS = (
    "recorded, lab_version, bridge, version, direction, scenario, client_protocol, "
    "lab_protocol, lab_level, steps, notes, runs, failure, seconds"
)
_PROTOCOL, _LEVEL = "protocol", "lab level"  # verdict keys beside the steps


def record(rows: Iterable[Row], *, path: Path | None = None, when: str | None = None) -> Path:
    """Keep ``rows`` (one ``bridges run``); returns the file."""
    where = path or history_path()
    stamp, lab = when or now(), lab_version()
    values = [
        (
            stamp,
            lab,
            row.bridge,
            row.version,
            row.direction,
            row.scenario,
            row.client_protocol,
            row.lab_protocol,
            row.lab_level,
            json.dumps({key: asdict(cell) for key, cell in row.steps.items()}),
            json.dumps(row.notes),
            json.dumps(row.runs),
            row.failure,
            row.seconds,
        )
        for row in rows
    ]
    insert(where, "bridge_verdicts", _COLUMNS, values)
    return where


def keep(made: list[Row], who: str) -> Path | None:
    """Keep ``made`` in the history; a history that cannot be written is said (by
    ``who``), and the command goes on (its rows are printed all the same)."""
    return history_store.keep(lambda: record(made), who)


@dataclass
class Entry:
    """One kept row."""

    recorded: str
    lab_version: str
    bridge: str
    version: str
    direction: str
    scenario: str
    client_protocol: str
    lab_protocol: str
    lab_level: int | None
    steps: dict[str, dict[str, Any]]
    notes: list[str]
    runs: dict[str, str]
    failure: str | None
    seconds: float | None
    count: int = 1  # identical entries of one version taken together
    last_recorded: str = ""

    @property
    def failed(self) -> bool:
        """No marks: the runner failed (an install, a run), or the bridge was not run."""
        return self.failure is not None or not self.steps

    @property
    def not_supported(self) -> str | None:
        """Why this version cannot run the direction (every step ``not supported``)."""
        marks = [step.get("mark") for step in self.steps.values()]
        if not marks or any(mark != NOT_SUPPORTED for mark in marks):
            return None
        return str(next(iter(self.steps.values())).get("detail") or NOT_SUPPORTED)

    def mark(self, key: str) -> str:
        """A step's mark with its count (``passed 3/3``); ``-`` when it has none."""
        step = self.steps.get(key)
        if step is None:
            return NOT_APPLICABLE
        count = step.get("count")
        return f"{step.get('mark')} {count}" if count else str(step.get("mark"))

    def verdict(self) -> dict[str, str]:
        """What a change is measured on: each step's mark (and count; not its detail or
        its time), the protocols negotiated both sides, the lab's level."""
        out = {key: self.mark(key) for key in STEPS}
        out[_PROTOCOL] = f"{self.client_protocol} / {self.lab_protocol}"
        out[_LEVEL] = "-" if self.lab_level is None else str(self.lab_level)
        return out

    def take_newest(self, newer: Entry) -> None:
        self.notes, self.runs, self.failure = newer.notes, newer.runs, newer.failure

    def to_json(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "last_recorded": self.last_recorded or self.recorded,
            "runs_kept": self.count,
            "lab_version": self.lab_version,
            "version": self.version,
            "client_protocol": self.client_protocol,
            "lab_protocol": self.lab_protocol,
            "lab_level": self.lab_level,
            "marks": {key: self.steps[key].get("mark") for key in STEPS if key in self.steps},
            "steps": self.steps,
            "notes": self.notes,
            "runs": self.runs,
            "failure": self.failure,
            "seconds": self.seconds,
        }


def read(path: Path | None = None, bridge: str | None = None) -> list[Entry]:
    """Every kept row (of ``bridge``), oldest first; none when there is no history yet
    (or only one of a schema before the bridges'). The file is opened read-only."""
    found = rows(path or history_path(), "bridge_verdicts", _COLUMNS, bridge=bridge)
    return [_entry(r) for r in found]


def _entry(row: tuple[Any, ...]) -> Entry:
    (recorded, lab, bridge, version, direction, scenario, client_protocol, lab_protocol,
     lab_level, steps, notes, runs, failure, seconds) = row  # fmt: skip
    return Entry(
        recorded, lab, bridge, version, direction, scenario, client_protocol, lab_protocol,
        lab_level, json.loads(steps), json.loads(notes), json.loads(runs), failure, seconds,
    )  # fmt: skip


class Change(history_cells.Change):
    def moved(self, key: str, before: str, after: str) -> str:
        return f"{STEPS.get(key, key)} {after} (was {before})"

    def text(self) -> str:
        """As the base, but a version that cannot run the direction, or the first
        after one that can, is said in one phrase, not step by step."""
        steps = [f for f in self.fields if f[0] in STEPS]
        rest = [self.moved(*f) for f in self.fields if f[0] not in STEPS]
        if steps and all(after == NOT_SUPPORTED for _, _, after in steps):
            return f"{self.version}: not supported in this direction"
        if steps and all(before == NOT_SUPPORTED for _, before, _ in steps):
            now = [f"{STEPS[k]} {after}" for k, _, after in steps if after != NOT_APPLICABLE]
            return f"{self.version}: now supported: {', '.join([*now, *rest])}"
        return super().text()


@dataclass
class Cell(history_cells.Cell[Entry]):
    """One bridge in one direction and scenario, over versions and dates."""

    bridge: str
    direction: str
    scenario: str

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        return {"direction": self.direction, "scenario": self.scenario,
                **self.history_json(limit)}  # fmt: skip


def cells(entries: Iterable[Entry]) -> list[Cell]:
    """The entries as cells (bridge, direction, scenario), each in version order then
    by date; identical verdicts of one version in a row are taken together, and each
    verdict that differs from the one before it (runner failures skipped) is a change."""
    found = history_cells.by_cell(entries, lambda e: (e.bridge, e.direction, e.scenario))
    return [Cell(*names).fill(kept, Change) for names, kept in found]


# -- renderings -----------------------------------------------------------------------


def _marks_text(entry: Entry) -> str:
    shown = [
        f"{title} {entry.mark(k)}" for k, title in STEPS.items() if entry.mark(k) != NOT_APPLICABLE
    ]
    level = "-" if entry.lab_level is None else entry.lab_level
    tail = f"protocol {entry.client_protocol} / {entry.lab_protocol}, lab level {level}"
    return ", ".join([*shown, tail])


def to_table(found: list[Cell], where: Path) -> str:
    if not found:
        return f"no bridges run kept yet in {where} (mcp-lab bridges run keeps each row there)"
    lines: list[str] = []
    bridge = None
    for cell in found:
        if cell.bridge != bridge:
            bridge = cell.bridge
            lines += [*([""] if lines else []), history_cells.cell_text(bridge)]
        # A bridge that could not be installed has one row, in no direction.
        direction, scenario = (history_cells.cell_text(v) for v in (cell.direction, cell.scenario))
        way = "install" if cell.direction == "-" else f"{direction} ({scenario})"
        lines.append(f"  {way}")
        told = False  # the cell's first verdict is given in full, later ones as changes
        for entry, change in zip(cell.entries, cell.changes, strict=True):
            version = history_cells.cell_text(entry.version)
            head = f"    {history_cells.when(entry):<19}  {version:<10}  lab {entry.lab_version:<7}"
            if entry.failed:
                why = entry.failure or "; ".join(entry.notes) or "not run"
                shown = untrusted.escape(untrusted.cut(why, _WHY_CHARS))
                lines.append(f"{head}  {'runner failed' if entry.failure else 'not run'} "
                             f"({shown})")  # fmt: skip
            elif change is not None:
                lines.append(f"{head}  CHANGED {history_cells.note_text(change.text())}")
            elif not told and entry.not_supported:
                why = f"{NOT_SUPPORTED}: {entry.not_supported}"
                lines.append(f"{head}  {history_cells.note_text(why)}")
            elif not told:
                lines.append(f"{head}  {history_cells.note_text(_marks_text(entry))}")
            else:
                lines.append(f"{head}  (same)")
            told = told or not entry.failed
    lines += ["", f"kept in {where}"]
    return "\n".join(lines)


def to_json(found: list[Cell], where: Path | None, limit: int | None = None) -> dict[str, Any]:
    """Per bridge, its cells with their latest marks, entries and changes."""
    bridges: dict[str, list[dict[str, Any]]] = {}
    for cell in found:
        bridges.setdefault(cell.bridge, []).append(cell.to_json(limit))
    data: dict[str, Any] = {"database": str(where)} if where is not None else {}
    data["steps"] = STEPS
    data["bridges"] = [{"bridge": name, "cells": kept} for name, kept in bridges.items()]
    return data


def matrix(path: Path | None = None) -> dict[str, Any]:
    """The dashboard's part: every cell's latest marks and its history (the newest
    :data:`CELL_ENTRIES` entries), without the file's path."""
    return to_json(cells(read(path)), None, CELL_ENTRIES)
