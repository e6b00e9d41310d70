"""The bridges matrix: its three renderings (a terminal table, markdown for
docs/bridges.md, JSON). A row is one bridge in one direction and scenario
(:mod:`mcp_lab.runners.bridges.verdict`); what the bridges and the lab said is cut and escaped
as in the lab's own reports (:mod:`mcp_lab.untrusted`)."""

from __future__ import annotations

import json

from mcp_lab import untrusted
from mcp_lab.runners.bridges.verdict import STEPS, Row

_NOTE_CHARS = 300
_COLUMNS = ("bridge", "version", "direction", "scenario", "protocol client/lab",
            *STEPS.values(), "lab level")  # fmt: skip


def _cells(row: Row) -> list[str]:
    steps = [row.steps[key].text() if key in row.steps else "-" for key in STEPS]
    level = "-" if row.lab_level is None else str(row.lab_level)
    protocols = f"{row.client_protocol} / {row.lab_protocol}"
    head = [row.bridge, row.version, row.direction, row.scenario, protocols]
    return [untrusted.shown(c, untrusted.TABLE_CELL_CHARS) for c in [*head, *steps, level]]


def _notes(row: Row) -> str:
    return "; ".join(untrusted.cut(n, _NOTE_CHARS) for n in row.notes) or "-"


def to_table(rows: list[Row]) -> str:
    cells = [list(_COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in cells]
    lines += ["", "notified, list_changed and resume: ms from the lab's send to the client"]
    for row in rows:
        where = f"{row.bridge} {row.direction} ({row.scenario})"
        lines.append(f"{where}: {untrusted.escape(_notes(row))}")
    return "\n".join(lines)


def to_markdown(rows: list[Row]) -> str:
    head = [*_COLUMNS, "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        notes = untrusted.for_markdown(_notes(row), len(_notes(row)))
        cells = [untrusted.for_markdown(c) for c in _cells(row)]
        lines.append("| " + " | ".join([*cells, notes]) + " |")
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row]) -> str:
    return json.dumps({"bridges": [r.to_json() for r in rows]}, indent=2)
