"""The compatibility matrix: its rows, and its columns for the renderings every
runner's matrix has (:mod:`mcp_lab.runners.matrix`: a terminal table, markdown for
docs/clients.md, JSON).

A row is one client over one transport (``http``, ``stdio``: how it reached the lab) in
one scenario (:mod:`mcp_lab.scenarios`) and lab setup (``no tool`` / ``tool``). It
answers the lab's checklist, each box yes/no with the time it happened (seconds after
the client started), from the client's own evidence
in the scored run: connected, listed, read, subscribed, notified, re-read after the
notification, reflected (``push``: the new version reached the model unasked;
``notice``: a text saying it changed; ``no``). ``pull`` answers another question,
from a separate run (the scenarios that have one): did version 2 reach the model when
the model asked to read again? It is a column and a note, never a level. The
scenario's own checkpoints follow (``checks``).
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import Any

from mcp_lab import untrusted
from mcp_lab.evidence import levels
from mcp_lab.runners.matrix import Matrix

# The checklist's boxes, in order, and their column titles. The first six are the
# lab's checkpoints (levels.CHECKPOINTS), under the checklist's names.
CHECKLIST: dict[str, str] = {
    "connected": "connect",
    "listed": "list",
    "read": "read v1",
    "subscribed": "subscribe",
    "notified": "notified",
    "re_read": "re-read",
    "reflected": "reflected",
    "pull": "pull",
}
CHECKPOINT_BOXES: dict[str, str] = dict(
    zip(levels.CHECKPOINTS, list(CHECKLIST)[: len(levels.CHECKPOINTS)], strict=True)
)
PUSH, NOTICE = "push", "notice"
_CLIENT_NOTE_CHARS = 1000  # a note in the markdown matrix, at most
RUNNER_FAILED = "runner failed"
NOT_RUN = "not run"


@dataclass
class Check:
    """One box of the checklist: the answer, and when (seconds after the client started)."""

    answer: str  # "yes", "no", "push", "notice", "n/a"
    at_s: float | None = None

    def cell(self) -> str:
        return self.answer if self.at_s is None else f"{self.answer} {self.at_s:.1f}s"


@dataclass
class ClientRow:
    """One line of the compatibility matrix: one client in one scenario and lab setup
    (``-`` for a client that could not be installed)."""

    client: str
    version: str
    scenario: str  # the scenario's name
    setup: str  # "no tool" or "tool" (the lab's tool offered), "-" when not run
    protocol: str = "-"
    transport: str = "-"  # how the client was to reach the lab: "http" or "stdio"
    lab_transport: str = "-"  # what the lab saw: "streamable-http", "sse" or "stdio"
    # The client's level; None when the runner failed or could not run it (shown "-").
    level: int | None = 0
    server_level: int | None = 0  # from the lab's evidence alone (0-6)
    checklist: dict[str, Check] = field(default_factory=dict)
    # The scenario's own checkpoints (its best session): key, title, answer, at_s.
    checks: list[dict[str, Any]] = field(default_factory=list)
    reflected: str | None = None  # PUSH, NOTICE, "no"; None without a model (Inspector)
    pull: bool | None = None  # version 2 reached the model when it asked (None: not run)
    runner_failed: str | None = None
    notes: list[str] = field(default_factory=list)
    client_info: str = "-"
    sessions: int = 0
    exit_code: int | None = None
    seconds: float = 0.0
    model: dict[str, Any] | None = None  # the scored run's model record
    pull_model: dict[str, Any] | None = None
    # The checkpoints the wire capture shows (True/False), where it disagrees or not.
    wire: dict[str, bool] | None = None
    runs: dict[str, str] = field(default_factory=dict)  # run -> its folder
    # Where the time went: seconds per phase of each run (services/mcp_lab/runners/phases.py),
    # and "install" for the client's install when this row paid for it.
    phases: dict[str, dict[str, float]] = field(default_factory=dict)

    def fail(self, why: str) -> ClientRow:
        """Mark the row as the runner's failure: no level."""
        self.runner_failed = why
        self.level = self.server_level = None
        self.notes.insert(0, f"{RUNNER_FAILED}: {why}")
        return self

    def to_json(self) -> dict[str, Any]:
        """The row as JSON: every box of the checklist, null where it has no answer (a
        row that never ran answers none: it says nothing of the client)."""
        data = asdict(self)
        data["level_name"] = level_name(self.level) if self.level is not None else self.no_level
        data["checklist"] = {box: data["checklist"].get(box) for box in CHECKLIST}
        return data

    @property
    def no_level(self) -> str:
        """Why a row without a level has none."""
        return RUNNER_FAILED if self.runner_failed else NOT_RUN


def level_name(level: int) -> str:
    return levels.LEVEL_NAMES[level]


_CLIENT_COLUMNS = (
    "client",
    "version",
    "scenario",
    "setup",
    "transport",
    "protocol",
    "level",
    *CHECKLIST.values(),
    "scenario checks",
)


def level_cell(row: ClientRow) -> str:
    if row.level is None:
        return f"- {row.no_level}"
    cell = f"{row.level} {level_name(row.level)}"
    if row.server_level is not None and row.server_level != row.level:
        cell += f" (server: {row.server_level})"
    return cell


def checks_cell(row: ClientRow) -> str:
    return "; ".join(f"{c['title']} {c['answer']}" for c in row.checks) or "-"


def _client_cells(row: ClientRow) -> list[str]:
    """A row's cells as a terminal prints them: a client file chose its name, a CLI
    printed its version, so each is cut to a report's cell and escaped."""
    return [untrusted.shown(c, untrusted.TABLE_CELL_CHARS) for c in _raw_cells(row)]


def _raw_cells(row: ClientRow) -> list[str]:
    boxes = [row.checklist[key].cell() if key in row.checklist else "-" for key in CHECKLIST]
    head = [row.client, row.version, row.scenario, row.setup, row.transport, row.protocol]
    head.append(level_cell(row))
    return [*head, *boxes, checks_cell(row)]


def _client_markdown_cells(row: ClientRow) -> list[str]:
    return [untrusted.for_markdown(c) for c in _raw_cells(row)]


def _client_note(row: ClientRow) -> str:
    """The line under the table with a row's notes, each cut and escaped (a note may
    quote what a client printed)."""
    where = untrusted.shown(f"{row.scenario}, {row.setup}, {row.transport}", 200)
    notes = "; ".join(untrusted.shown(n, _CLIENT_NOTE_CHARS) for n in row.notes) or "-"
    return f"{untrusted.shown(row.client, untrusted.TABLE_CELL_CHARS)} ({where}): {notes}"


def _client_markdown_notes(row: ClientRow) -> str:
    return "; ".join(_cell_text(note) for note in row.notes) or "-"


def _cell_text(note: str) -> str:
    """A note in a markdown table cell: it may quote what a client chose, so one line
    (control characters escaped), its HTML written as entities, its pipes escaped."""
    return html.escape(untrusted.shown(note, _CLIENT_NOTE_CHARS), quote=False).replace("|", "\\|")


CLIENT_MATRIX: Matrix[ClientRow] = Matrix(
    columns=_CLIENT_COLUMNS,
    cells=_client_cells,
    markdown_cells=_client_markdown_cells,
    table_note=_client_note,
    markdown_notes=_client_markdown_notes,
    legend="times: seconds after the client started; pull is never a level",
    key="clients",
    naming=6,
    row_json=ClientRow.to_json,
)
