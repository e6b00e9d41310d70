"""The bridges matrix: its columns for the renderings every runner's matrix has
(:mod:`mcp_lab.runners.matrix`: a terminal table, markdown for docs/bridges.md, JSON). A
row is one bridge in one direction and scenario (:mod:`mcp_lab.runners.bridges.verdict`);
what the bridges and the lab said is cut and escaped as in the lab's own reports
(:mod:`mcp_lab.untrusted`)."""

from __future__ import annotations

from mcp_lab import untrusted
from mcp_lab.runners.bridges.verdict import STEPS, BridgeRow
from mcp_lab.runners.matrix import Matrix

_BRIDGE_NOTE_CHARS = 300
_BRIDGE_COLUMNS = ("bridge", "version", "direction", "scenario", "protocol client/lab",
                   *STEPS.values(), "lab level")  # fmt: skip


def _bridge_cells(row: BridgeRow) -> list[str]:
    steps = [row.steps[key].text() if key in row.steps else "-" for key in STEPS]
    level = "-" if row.lab_level is None else str(row.lab_level)
    protocols = f"{row.client_protocol} / {row.lab_protocol}"
    head = [row.bridge, row.version, row.direction, row.scenario, protocols]
    return [untrusted.shown(c, untrusted.TABLE_CELL_CHARS) for c in [*head, *steps, level]]


def _bridge_notes(row: BridgeRow) -> str:
    return "; ".join(untrusted.cut(n, _BRIDGE_NOTE_CHARS) for n in row.notes) or "-"


def _bridge_note(row: BridgeRow) -> str:
    return f"{row.bridge} {row.direction} ({row.scenario}): {untrusted.escape(_bridge_notes(row))}"


def _bridge_markdown_cells(row: BridgeRow) -> list[str]:
    return [untrusted.for_markdown(c) for c in _bridge_cells(row)]


def _bridge_markdown_notes(row: BridgeRow) -> str:
    notes = _bridge_notes(row)
    return untrusted.for_markdown(notes, len(notes))


BRIDGE_MATRIX: Matrix[BridgeRow] = Matrix(
    columns=_BRIDGE_COLUMNS,
    cells=_bridge_cells,
    markdown_cells=_bridge_markdown_cells,
    table_note=_bridge_note,
    markdown_notes=_bridge_markdown_notes,
    legend="notified, list_changed and resume: ms from the lab's send to the client",
    key="bridges",
    naming=5,
    row_json=BridgeRow.to_json,
)
