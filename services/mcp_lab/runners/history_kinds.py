"""The matrix history, one piece of code for every kind of program under test.

Clients and bridges keep their rows alike: each row of a ``run`` goes into a table of
the history's file (:mod:`mcp_lab.runners.history_store`) with the date and the lab's
version, is read back as an entry, and the entries are taken together in cells
(:mod:`mcp_lab.runners.history_cells`), shown as a table (``mcp-lab clients|bridges
history``), as JSON, or as the dashboard's matrix. What differs between the kinds is
small and is said by a :class:`HistoryKind`: its table and columns, how a row becomes
values and a stored row an entry, what names a cell, and the few texts its table
prints. Each kind's own module (``runners/clients/history.py``,
``runners/bridges/history.py``) makes its kind object (``CLIENT_HISTORY``,
``BRIDGE_HISTORY``); everything else here is the same for both.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from mcp_lab import untrusted
from mcp_lab.runners import history_cells, history_store
from mcp_lab.runners.history_cells import Cell, Change, Kept, by_cell, cell_text, note_text
from mcp_lab.runners.history_store import history_path, insert, lab_version, now, rows

RUN = "run"  # where a row came from when nothing else is said: a run of the command
CELL_ENTRIES = 50  # entries of one cell the dashboard's matrix carries at most

R = TypeVar("R")  # a row of the kind's matrix, as its runner made it
E = TypeVar("E", bound=Kept)  # a kept row read back
C = TypeVar("C", bound=Cell[Any])  # one cell of entries


@dataclass(frozen=True)
class HistoryKind(Generic[R, E, C]):
    """One kind's history: what it keeps, and how it is shown. Its methods are the
    history itself, the same code for every kind."""

    # The kind, "client": the table's column of the program's name, the field of that
    # name in its entries and cells, the key of it in the JSON.
    name: str
    # "clients": the command that keeps the rows (mcp-lab clients run), and the JSON's
    # list of programs.
    plural: str
    table: str  # the SQLite table of its rows
    # The columns written and read, in order; "recorded" and "lab_version" first (the
    # history fills them in), and any of ``later`` last.
    columns: tuple[str, ...]
    # A row's values for the columns after those two, given where it came from (a kind
    # whose table keeps no source ignores it).
    values: Callable[[R, str], tuple[object, ...]]
    entry: Callable[[tuple[Any, ...]], E]  # a stored row (every column) as an entry
    cell_names: Callable[[E], tuple[str, ...]]  # what names an entry's cell: the program first
    cell: Callable[..., C]  # the cell of those names (given in that order)
    change: type[Change]  # how a change of the verdict is said
    heading: Callable[[C], str]  # the cell's line in the table, under the program's name
    # What an entry's line says after its date, version and lab version (may be "").
    line_head: Callable[[E], str]
    failed: Callable[[E], str]  # what a line says of an entry without a verdict: why
    summary: Callable[[E], str]  # a verdict in full (the first of a cell)
    json_head: Callable[[list[C]], dict[str, Any]]  # the JSON's keys before the programs
    # Columns a later schema added (last in ``columns``), with what a row of a file
    # written before them reads as.
    later: tuple[tuple[str, object], ...] = ()

    # -- the file ---------------------------------------------------------------------

    def record(
        self,
        made: Iterable[R],
        source: str = RUN,
        *,
        path: Path | None = None,
        when: str | None = None,
    ) -> Path:
        """Keep ``made`` (the rows of one command, or of one version of a sweep);
        returns the file."""
        where = path or history_path()
        stamp, lab = when or now(), lab_version()
        values = [(stamp, lab, *self.values(row, source)) for row in made]
        insert(where, self.table, ", ".join(self.columns), values)
        return where

    def keep(self, made: list[R], who: str | None = None, source: str = RUN) -> Path | None:
        """Keep ``made`` in the history; a history that cannot be written is said (by
        ``who``, default ``mcp-lab <plural>``), and the command goes on (its rows are
        printed all the same)."""
        said = who or f"mcp-lab {self.plural}"
        return history_store.keep(lambda: self.record(made, source), said)

    def read(self, path: Path | None = None, name: str | None = None) -> list[E]:
        """Every kept row (of the program ``name``), oldest first; none when there is
        no history yet (or no table of this kind in it). The file is opened read-only."""
        where = path or history_path()
        asked = {self.name: name}
        try:
            found = rows(where, self.table, ", ".join(self.columns), **asked)
        except sqlite3.OperationalError as exc:
            if not any(f"no such column: {column}" in str(exc) for column, _ in self.later):
                raise
            # A file an older lab wrote: each later column it lacks reads as its default.
            there = history_store.columns_of(where, self.table)
            defaults = dict(self.later)
            kept = [c for c in self.columns if c not in defaults or c in there]
            found = []
            for row in rows(where, self.table, ", ".join(kept), **asked):
                values = dict(zip(kept, row, strict=True))
                found.append(tuple(values.get(c, defaults.get(c)) for c in self.columns))
        entries: list[E] = []
        bad: list[str] = []
        for row in found:
            try:
                entries.append(self.entry(row))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                bad.append(f"{row[0]!r} ({type(exc).__name__}: {exc})")
        if bad:
            # A row another program wrote, or a disk's damage: the others are still read.
            first = untrusted.shown(bad[0], history_cells.WHY_CHARS)
            print(
                f"mcp-lab: skipped {len(bad)} {self.name} row(s) of {where} that do not "
                f"parse (the first recorded {first})",
                file=sys.stderr,
            )
        return entries

    # -- cells and renderings ---------------------------------------------------------

    def cells(self, entries: Iterable[E]) -> list[C]:
        """The entries as cells, in the order of their names, each in version order then
        by date; identical verdicts of one version in a row are taken together, and
        each verdict that differs from the one before it (runner failures skipped) is
        a change."""
        found = by_cell(entries, self.cell_names)
        return [self.cell(*names).fill(kept, self.change) for names, kept in found]

    def program(self, cell: C) -> str:
        """The name of the program a cell is of."""
        name: str = getattr(cell, self.name)
        return name

    def to_table(self, found: list[C], where: Path) -> str:
        """Per program, each of its cells and, per entry, one line: the cell's first
        verdict in full, later ones as a change or ``(same)``, a failure with why."""
        if not found:
            return (
                f"no {self.plural} run kept yet in {where} "
                f"(mcp-lab {self.plural} run keeps each row there)"
            )
        lines: list[str] = []
        program = None
        for cell in found:
            if self.program(cell) != program:
                program = self.program(cell)
                lines += [*([""] if lines else []), cell_text(program)]
            lines.append(f"  {self.heading(cell)}")
            told = False  # the cell's first verdict is given in full, later ones as changes
            for entry, change in zip(cell.entries, cell.changes, strict=True):
                # What a program or its CLI printed (names, versions, notes, failures)
                # is cut and escaped: a terminal reads this table.
                version = cell_text(entry.version)
                date = history_cells.when(entry)
                head = f"    {date:<19}  {version:<10}  lab {entry.lab_version:<7}"
                if entry.failed:
                    said = self.failed(entry)
                elif change is not None:
                    said = f"CHANGED {note_text(change.text())}"
                elif not told:
                    said = note_text(self.summary(entry))
                else:
                    said = "(same)"
                lines.append(f"{head}{self.line_head(entry)}  {said}")
                told = told or not entry.failed
        lines += ["", f"kept in {where}"]
        return "\n".join(lines)

    def to_json(
        self, found: list[C], where: Path | None, limit: int | None = None
    ) -> dict[str, Any]:
        """Per program, its cells with their latest verdict, entries (the newest
        ``limit``) and changes; with the file's path unless ``where`` is None."""
        programs: dict[str, list[dict[str, Any]]] = {}
        for cell in found:
            programs.setdefault(self.program(cell), []).append(cell.to_json(limit))
        data: dict[str, Any] = {"database": str(where)} if where is not None else {}
        data.update(self.json_head(found))
        data[self.plural] = [{self.name: name, "cells": kept} for name, kept in programs.items()]
        # Cut like the table: a client chose its name, version and notes.
        cut: dict[str, Any] = history_cells.json_cut(data)
        if where is not None:
            cut["database"] = str(where)  # the lab's own path, whole
        return cut

    def matrix(self, path: Path | None = None) -> dict[str, Any]:
        """The dashboard's part: every cell's latest verdict and its history (the newest
        :data:`CELL_ENTRIES` entries), without the file's path."""
        return self.to_json(self.cells(self.read(path)), None, CELL_ENTRIES)
