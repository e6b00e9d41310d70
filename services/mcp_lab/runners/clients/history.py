"""The clients matrix's history: every row of ``mcp-lab clients run`` and ``sweep``, kept.

A row (:class:`mcp_lab.runners.clients.matrix.Row`) is one client version in one scenario and
lab setup. Each is kept with the date, the lab's version and where it came from (a
``run`` or a ``sweep``): the level, the checklist's answers, the scenario's own checks,
the notes and the run folders. ``mcp-lab clients history`` shows, per client, each
scenario and setup over its versions (in version order, then by date) and marks every
change of the verdict; the dashboard's matrix (``/api/matrix``) shows the latest verdict
per client and scenario with the history behind it.

The store is one SQLite file (the standard library's ``sqlite3``), ``history.sqlite3``
in the lab's data directory (``$XDG_DATA_HOME/mcp-lab``, default
``~/.local/share/mcp-lab``; ``MCP_LAB_HISTORY`` names another file). Not the lab's
Redis: a clients run starts labs of its own and needs no running one, a sweep takes
hours and its rows must survive any lab's reset or Redis's ``maxmemory``, and a file
is what a user copies, backs up or deletes. SQLite takes concurrent writers (a run and
a sweep at once) by locking the file; readers (the dashboard) open it read-only. The
file, its schema and its upgrades are :mod:`mcp_lab.runners.history_store`'s; the bridges'
rows are in the same file (:mod:`mcp_lab.runners.bridges.history`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_lab import untrusted
from mcp_lab.runners import history_cells
from mcp_lab.runners.clients.definition import HTTP
from mcp_lab.runners.clients.matrix import CHECKLIST, Row, level_name
from mcp_lab.runners.history_store import history_path, insert, lab_version, now, rows

RUN, SWEEP = "run", "sweep"
# The finished rows of a run that was stopped by Ctrl-C (each row is whole).
INTERRUPTED = "interrupted"
CELL_ENTRIES = 50  # entries of one cell the dashboard's matrix carries at most

_COLUMNS = (
    "recorded, lab_version, source, client, version, scenario, setup, protocol, level, "
    "server_level, answers, checks, notes, runs, runner_failed, transport"
)
# A file no lab of schema 3 wrote yet has no transport column: its rows are http's.
_BEFORE_TRANSPORT = _COLUMNS.removesuffix(", transport")


def record(
    rows: Iterable[Row],
    source: str = RUN,
    *,
    path: Path | None = None,
    when: str | None = None,
) -> Path:
    """Keep ``rows`` (one ``clients run``, or one version of a sweep); returns the file."""
    where = path or history_path()
    stamp, lab = when or now(), lab_version()
    values = [
        (
            stamp,
            lab,
            source,
            row.client,
            row.version,
            row.scenario,
            row.setup,
            row.protocol,
            row.level,
            row.server_level,
            json.dumps({key: check.answer for key, check in row.checklist.items()}),
            json.dumps([{k: c.get(k) for k in ("key", "title", "answer")} for c in row.checks]),
            json.dumps(row.notes),
            json.dumps(row.runs),
            row.runner_failed,
            row.transport if row.transport != "-" else HTTP,
        )
        for row in rows
    ]
    insert(where, "verdicts", _COLUMNS, values)
    return where


@dataclass
class Entry:
    """One kept row."""

    recorded: str
    lab_version: str
    source: str  # RUN or SWEEP (of entries taken together: each, joined by "+")
    client: str
    version: str
    scenario: str
    setup: str
    protocol: str
    level: int | None
    server_level: int | None
    answers: dict[str, str]
    checks: list[dict[str, Any]]
    notes: list[str]
    runs: dict[str, str]
    runner_failed: str | None
    transport: str = HTTP
    count: int = 1  # identical entries of one version taken together
    last_recorded: str = ""

    @property
    def failed(self) -> bool:
        """No verdict: the runner failed, or the client could not be run."""
        return self.level is None

    def verdict(self) -> dict[str, str]:
        """What a change is measured on: the level, the protocol negotiated, each checklist
        answer, each of the scenario's checks (by title)."""
        out = {"level": "-" if self.level is None else str(self.level), "protocol": self.protocol}
        out.update(self.answers)
        for check in self.checks:
            out[f"check:{check.get('title') or check.get('key')}"] = str(check.get("answer"))
        return out

    def take_newest(self, newer: Entry) -> None:
        if newer.source not in self.source.split("+"):
            self.source += f"+{newer.source}"
        self.notes, self.runs = newer.notes, newer.runs  # the newest run's

    def level_text(self) -> str:
        if self.level is None:
            return "- runner failed" if self.runner_failed else "- not run"
        return f"{self.level} {level_name(self.level)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "last_recorded": self.last_recorded or self.recorded,
            "runs_kept": self.count,
            "lab_version": self.lab_version,
            "source": self.source,
            "version": self.version,
            "protocol": self.protocol,
            "transport": self.transport,
            "level": self.level,
            "level_name": self.level_text().partition(" ")[2],
            "server_level": self.server_level,
            "answers": self.answers,
            "checks": self.checks,
            "notes": self.notes,
            "runs": self.runs,
            "runner_failed": self.runner_failed,
        }


def read(path: Path | None = None, client: str | None = None) -> list[Entry]:
    """Every kept row (of ``client``), oldest first; none when there is no history yet.
    The file is opened read-only."""
    where = path or history_path()
    try:
        found = rows(where, "verdicts", _COLUMNS, client=client)
    except sqlite3.OperationalError as exc:
        if "no such column: transport" not in str(exc):
            raise
        found = [(*r, HTTP) for r in rows(where, "verdicts", _BEFORE_TRANSPORT, client=client)]
    return [_entry(r) for r in found]


def _entry(row: tuple[Any, ...]) -> Entry:
    (recorded, lab, source, client, version, scenario, setup, protocol, level, server_level,
     answers, checks, notes, runs, failed, transport) = row  # fmt: skip
    return Entry(
        recorded, lab, source, client, version, scenario, setup, protocol, level, server_level,
        json.loads(answers), json.loads(checks), json.loads(notes), json.loads(runs), failed,
        transport,
    )  # fmt: skip


class Change(history_cells.Change):
    def moved(self, key: str, before: str, after: str) -> str:
        if key == "level":
            return f"level {before} -> {after}"
        return f"{key.removeprefix('check:')}: {before} -> {after}"


@dataclass
class Cell(history_cells.Cell[Entry]):
    """One client in one scenario and lab setup, over versions and dates."""

    client: str
    scenario: str
    setup: str
    transport: str = HTTP

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        where = {"scenario": self.scenario, "setup": self.setup, "transport": self.transport}
        return {**where, **self.history_json(limit)}


def cells(entries: Iterable[Entry]) -> list[Cell]:
    """The entries as cells (client, scenario, setup), each in version order then by
    date; identical verdicts of one version in a row are taken together, and each
    verdict that differs from the one before it (runner failures skipped) is a change."""
    found = history_cells.by_cell(entries, lambda e: (e.client, e.scenario, e.setup, e.transport))
    return [Cell(*names).fill(kept, Change) for names, kept in found]


# -- renderings -----------------------------------------------------------------------


def _answers_text(entry: Entry) -> str:
    boxes = [f"{CHECKLIST.get(k, k)} {v}" for k, v in entry.answers.items()]
    checks = [f"{c.get('title')} {c.get('answer')}" for c in entry.checks]
    return ", ".join(boxes + checks)


def to_table(found: list[Cell], where: Path) -> str:
    if not found:
        return f"no clients run kept yet in {where} (mcp-lab clients run keeps each row there)"
    lines: list[str] = []
    client = None
    for cell in found:
        if cell.client != client:
            client = cell.client
            lines += [*([""] if lines else []), history_cells.cell_text(client)]
        where_run = ", ".join(history_cells.cell_text(v) for v in (cell.setup, cell.transport))
        lines.append(f"  {history_cells.cell_text(cell.scenario)} ({where_run})")
        told = False  # the cell's first verdict is given in full, later ones as changes
        for entry, change in zip(cell.entries, cell.changes, strict=True):
            when = history_cells.when(entry)
            # What a client or its CLI printed (names, versions, notes, failures) is cut
            # and escaped: a terminal reads this table.
            version = history_cells.cell_text(entry.version)
            head = (
                f"    {when:<19}  {version:<10}  lab {entry.lab_version:<7} "
                f"{entry.source:<9}  level {entry.level_text()}"
            )
            if entry.failed:
                why = entry.runner_failed or "; ".join(entry.notes) or "not run"
                lines.append(f"{head}  ({untrusted.shown(why, 100)})")
            elif change is not None:
                lines.append(f"{head}  CHANGED {history_cells.note_text(change.text())}")
            elif not told:
                lines.append(f"{head}  {history_cells.note_text(_answers_text(entry))}")
            else:
                lines.append(f"{head}  (same)")
            told = told or not entry.failed
    lines += ["", f"kept in {where}"]
    return "\n".join(lines)


def to_json(found: list[Cell], where: Path, limit: int | None = None) -> dict[str, Any]:
    """Per client, its cells with their latest verdict, entries and changes."""
    clients: dict[str, list[dict[str, Any]]] = {}
    for cell in found:
        clients.setdefault(cell.client, []).append(cell.to_json(limit))
    return {
        "database": str(where),
        "scenarios": sorted({c.scenario for c in found}),
        "clients": [{"client": name, "cells": kept} for name, kept in clients.items()],
    }


def matrix(path: Path | None = None) -> dict[str, Any]:
    """The dashboard's matrix: every cell's latest verdict and its history (the newest
    :data:`CELL_ENTRIES` entries), without the file's path."""
    data = to_json(cells(read(path)), path or history_path(), CELL_ENTRIES)
    data.pop("database")
    return data
