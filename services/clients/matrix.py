"""The compatibility matrix: its rows, its scenarios, and its three renderings
(a terminal table, markdown for docs/clients.md, JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from services.evidence import scoring

# Each client runs in both: a lab that offers resources only (its default), then one
# that also offers the server's tool get_review_status (MCP_TEST_ENABLE_TOOL=true).
NO_TOOL_SCENARIO, TOOL_SCENARIO = "no tool", "tool"
SCENARIOS: tuple[str, ...] = (NO_TOOL_SCENARIO, TOOL_SCENARIO)
# ``--scenario`` values.
SCENARIO_CHOICES: dict[str, tuple[str, ...]] = {
    "no-tool": (NO_TOOL_SCENARIO,),
    "tool": (TOOL_SCENARIO,),
    "both": SCENARIOS,
}


@dataclass
class Row:
    """One line of the compatibility matrix: one client in one scenario (``-`` for a
    client that could not be installed)."""

    client: str
    version: str
    scenario: str
    protocol: str = "-"
    transport: str = "-"
    level: int = 0
    server_level: int = 0
    notes: list[str] = field(default_factory=list)
    model_saw_v1: bool | None = None
    model_saw_v2: bool | None = None
    client_info: str = "-"
    sessions: int = 0
    exit_code: int | None = None
    seconds: float = 0.0
    model: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["level_name"] = scoring.LEVEL_NAMES[self.level]
        return data


def _yes(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


_COLUMNS = (
    "client",
    "version",
    "scenario",
    "protocol",
    "transport",
    "level",
    "model saw v1",
    "model saw v2",
)


def _cells(row: Row) -> list[str]:
    level = f"{row.level} {scoring.LEVEL_NAMES[row.level]}"
    if row.server_level != row.level:
        level += f" (server: {row.server_level})"
    return [
        row.client,
        row.version,
        row.scenario,
        row.protocol,
        row.transport,
        level,
        _yes(row.model_saw_v1),
        _yes(row.model_saw_v2),
    ]


def to_table(rows: list[Row]) -> str:
    cells = [list(_COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in cells]
    for row in rows:
        lines.append(f"{row.client} ({row.scenario}): " + ("; ".join(row.notes) or "-"))
    return "\n".join(lines)


def to_markdown(rows: list[Row]) -> str:
    head = [*_COLUMNS, "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        notes = "; ".join(row.notes).replace("|", "\\|") or "-"
        lines.append("| " + " | ".join([*_cells(row), notes]) + " |")
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row]) -> str:
    return json.dumps({"clients": [r.to_json() for r in rows]}, indent=2)
