"""A runner's matrix and its renderings, for either kind of program under test.

A clients run and a bridges run each end in rows (one program version in one scenario,
and in one lab setup or one direction). Their columns differ; how they are shown does
not: a terminal table with a legend and each row's notes under it, markdown for the
docs (docs/clients.md, docs/bridges.md), and JSON of every row. Each kind describes its
columns once, as a :class:`Matrix` (``CLIENT_MATRIX`` in
:mod:`mcp_lab.runners.clients.matrix`, ``BRIDGE_MATRIX`` in
:mod:`mcp_lab.runners.bridges.matrix`), and :data:`FORMATS` names the renderings the
runners' ``--format`` offers.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

R = TypeVar("R")  # a row of one kind's matrix

TABLE, MARKDOWN, JSON = "table", "markdown", "json"
# The renderings of a runner's matrix (``--format``), the default first.
FORMATS: dict[str, str] = {
    TABLE: "the matrix (default)",
    MARKDOWN: "as in {docs}",
    JSON: "every row",
}


def terminal_width() -> int | None:
    """The width of the terminal the table is printed on; None when stdout is no
    terminal (a file, a pipe: the table keeps its columns, one line per row)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def formats_help(docs: str) -> str:
    """``--format``'s help: each format and what it gives (``docs``: the page whose
    tables the markdown is)."""
    return "; ".join(f"{name}: {what.format(docs=docs)}" for name, what in FORMATS.items())


@dataclass(frozen=True)
class Matrix(Generic[R]):
    """How one kind's rows are shown."""

    columns: tuple[str, ...]
    cells: Callable[[R], list[str]]  # a row's cells, in ``columns`` order (the table's)
    markdown_cells: Callable[[R], list[str]]  # as ``cells``, ready for a markdown table
    table_note: Callable[[R], str]  # the line under the table that gives a row's notes
    markdown_notes: Callable[[R], str]  # the notes column of the markdown table
    legend: str  # the line between the table and the rows' notes
    key: str  # the JSON's key for the list of rows
    row_json: Callable[[R], dict[str, Any]]
    # How many of the first columns name a row (client, version, scenario, ...): in the
    # narrow table they are the row's first line, the other columns the lines under it.
    naming: int

    def table(self, rows: list[R], width: int | None = None) -> str:
        """The rows as columns, or, when that is wider than ``width`` (a terminal's), a
        block per row: what names it on one line, then ``column answer`` pairs wrapped
        to ``width``. Then the legend and each row's notes."""
        lines = [list(self.columns), *(self.cells(r) for r in rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.columns))]
        text = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
        notes = [self.table_note(r) for r in rows]
        if width is not None and max(len(line.rstrip()) for line in text) > width:
            text = [part for cells in lines[1:] for part in self._block(cells, width)]
            notes = [
                line
                for note in notes
                for line in textwrap.wrap(note, width, subsequent_indent="    ") or [""]
            ]
        return "\n".join([*text, "", self.legend, *notes])

    def _block(self, cells: list[str], width: int) -> list[str]:
        pairs = [
            f"{name} {cell}"
            for name, cell in zip(self.columns[self.naming :], cells[self.naming :], strict=True)
            if cell not in ("", "-")
        ]
        wrapped = textwrap.wrap(
            " · ".join(pairs), width, initial_indent="    ", subsequent_indent="    ",
            break_long_words=False, break_on_hyphens=False,
        )  # fmt: skip
        return [" · ".join(cells[: self.naming]), *wrapped]

    def markdown(self, rows: list[R]) -> str:
        head = [*self.columns, "notes"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            cells = [*self.markdown_cells(row), self.markdown_notes(row)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def json(self, rows: list[R]) -> str:
        return json.dumps({self.key: [self.row_json(r) for r in rows]}, indent=2)

    def render(self, rows: list[R], form: str) -> str:
        """``rows`` in the format ``form`` names (one of :data:`FORMATS`), as printed:
        markdown ends with its own newline, the others get one from ``print``."""
        if form == JSON:
            return self.json(rows) + "\n"
        if form == MARKDOWN:
            return self.markdown(rows)
        if form == TABLE:
            return self.table(rows, terminal_width()) + "\n"
        raise ValueError(f"unknown format {form!r}; known: {', '.join(FORMATS)}")
