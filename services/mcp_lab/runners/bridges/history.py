"""The bridges matrix's history: every row of ``mcp-lab bridges run``, kept.

A row (:class:`mcp_lab.runners.bridges.verdict.BridgeRow`) is one bridge version in one
direction and scenario. Each is kept in the matrix history's file
(:mod:`mcp_lab.runners.history_store`, table ``bridge_verdicts``, beside the clients'
``verdicts``) with the date, the lab's version, the protocols negotiated, the lab's
level, each step's mark and what it rests on, the notes and the run folders.
``mcp-lab bridges history`` shows, per bridge, direction and scenario, the marks over
versions (in version order, then by date) and marks every change ("0.16.0: notified
passed 1/1 (was dropped 0/1)"; a version that cannot run the direction, "0.0.22: not
supported: ...", and the one after it that can, "0.1.0: now supported: ..."); the
dashboard's matrix (``/api/matrix``) carries each cell's latest marks with the history
behind them.

The history is one piece of code for bridges and clients
(:class:`mcp_lab.runners.history_kinds.HistoryKind`); this module says only what is the
bridges' own: what a kept row is (:class:`BridgeEntry`), what names its cell
(:class:`BridgeCell`), how a change is said (:class:`BridgeChange`), and the texts of
its table, all in :data:`BRIDGE_HISTORY` (whose ``record``, ``read``, ``cells``,
``to_table``, ``to_json``, ``matrix`` and ``keep`` are the history's).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from mcp_lab.runners import history_cells
from mcp_lab.runners.bridges.verdict import NOT_APPLICABLE, NOT_SUPPORTED, STEPS, BridgeRow
from mcp_lab.runners.history_kinds import HistoryKind

_PROTOCOL, _LEVEL = "protocol", "lab level"  # verdict keys beside the steps


def _bridge_values(row: BridgeRow, _source: str) -> tuple[object, ...]:
    """A row's values for the table's columns after ``recorded`` and ``lab_version``
    (the bridges' table keeps no source: every row is a run's)."""
    return (
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


@dataclass
class BridgeEntry:
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

    @classmethod
    def from_stored(cls, row: tuple[Any, ...]) -> BridgeEntry:
        """The entry of a stored row (the kind's columns, in order)."""
        (recorded, lab, bridge, version, direction, scenario, client_protocol, lab_protocol,
         lab_level, steps, notes, runs, failure, seconds) = row  # fmt: skip
        return cls(
            recorded, lab, bridge, version, direction, scenario, client_protocol, lab_protocol,
            lab_level, json.loads(steps), json.loads(notes), json.loads(runs), failure, seconds,
        )  # fmt: skip

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

    def cell_names(self) -> tuple[str, str, str]:
        return (self.bridge, self.direction, self.scenario)

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

    def take_newest(self, newer: BridgeEntry) -> None:
        self.notes, self.runs, self.failure = newer.notes, newer.runs, newer.failure

    # -- in the table ---------------------------------------------------------------

    def line_head(self) -> str:
        """Nothing after the date, version and lab version (a bridge's row has no
        source or level of its own)."""
        return ""

    def failed_text(self) -> str:
        why = self.failure or "; ".join(self.notes) or "not run"
        return f"{'runner failed' if self.failure else 'not run'} ({history_cells.why_text(why)})"

    def marks_text(self) -> str:
        """The verdict in full: each step's mark, the protocols and the lab's level; or,
        for a version that cannot run the direction, why."""
        if self.not_supported:
            return f"{NOT_SUPPORTED}: {self.not_supported}"
        marks = [(title, self.mark(key)) for key, title in STEPS.items()]
        shown = [f"{title} {mark}" for title, mark in marks if mark != NOT_APPLICABLE]
        level = "-" if self.lab_level is None else self.lab_level
        tail = f"protocol {self.client_protocol} / {self.lab_protocol}, lab level {level}"
        return ", ".join([*shown, tail])

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


class BridgeChange(history_cells.Change):
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
class BridgeCell(history_cells.Cell[BridgeEntry]):
    """One bridge in one direction and scenario, over versions and dates."""

    bridge: str
    direction: str
    scenario: str

    def heading(self) -> str:
        """Its line in the table: the direction and scenario (a bridge that could not
        be installed has one row, in no direction)."""
        if self.direction == "-":
            return "install"
        direction, scenario = (history_cells.cell_text(v) for v in (self.direction, self.scenario))
        return f"{direction} ({scenario})"

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        return {"direction": self.direction, "scenario": self.scenario,
                **self.history_json(limit)}  # fmt: skip


BRIDGE_HISTORY: HistoryKind[BridgeRow, BridgeEntry, BridgeCell] = HistoryKind(
    name="bridge",
    plural="bridges",
    table="bridge_verdicts",
    columns=tuple(
        "recorded lab_version bridge version direction scenario client_protocol lab_protocol "
        "lab_level steps notes runs failure seconds".split()
    ),
    values=_bridge_values,
    entry=BridgeEntry.from_stored,
    cell_names=BridgeEntry.cell_names,
    cell=BridgeCell,
    change=BridgeChange,
    heading=BridgeCell.heading,
    line_head=BridgeEntry.line_head,
    failed=BridgeEntry.failed_text,
    summary=BridgeEntry.marks_text,
    json_head=lambda _: {"steps": STEPS},
)
