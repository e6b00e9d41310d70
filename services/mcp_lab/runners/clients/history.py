"""The clients matrix's history: every row of ``mcp-lab clients run`` and ``sweep``, kept.

A row (:class:`mcp_lab.runners.clients.matrix.ClientRow`) is one client version in one
scenario and lab setup. Each is kept with the date, the lab's version and where it came
from (a ``run`` or a ``sweep``): the level, the checklist's answers, the scenario's own checks,
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

The history is one piece of code for clients and bridges
(:class:`mcp_lab.runners.history_kinds.HistoryKind`); this module says only what is the
clients' own: what a kept row is (:class:`ClientEntry`), what names its cell
(:class:`ClientCell`), how a change is said (:class:`ClientChange`), and the texts of
its table, all in :data:`CLIENT_HISTORY` (whose ``record``, ``read``, ``cells``,
``to_table``, ``to_json``, ``matrix`` and ``keep`` are the history's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp_lab.runners import history_cells, history_kinds
from mcp_lab.runners.clients.definition import HTTP
from mcp_lab.runners.clients.matrix import CHECKLIST, ClientRow, level_name
from mcp_lab.runners.history_kinds import HistoryKind

RUN, SWEEP = history_kinds.RUN, "sweep"
# The finished rows of a run that was stopped by Ctrl-C (each row is whole).
INTERRUPTED = "interrupted"


def _client_values(row: ClientRow, source: str) -> tuple[object, ...]:
    """A row's values for the table's columns after ``recorded`` and ``lab_version``."""
    return (
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
        row.client_info if row.client_info != "-" else "",
    )


@dataclass
class ClientEntry:
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
    # The clientInfo its client sent, "name/version" ("": not kept, or nobody connected).
    client_info: str = ""
    count: int = 1  # identical entries of one version taken together
    last_recorded: str = ""

    @classmethod
    def from_stored(cls, row: tuple[Any, ...]) -> ClientEntry:
        """The entry of a stored row (the kind's columns, in order)."""
        (recorded, lab, source, client, version, scenario, setup, protocol, level, server_level,
         answers, checks, notes, runs, failed, transport, client_info) = row  # fmt: skip
        return cls(
            recorded, lab, source, client, version, scenario, setup, protocol, level, server_level,
            json.loads(answers), json.loads(checks), json.loads(notes), json.loads(runs), failed,
            transport, client_info,
        )  # fmt: skip

    @property
    def failed(self) -> bool:
        """No verdict: the runner failed, or the client could not be run."""
        return self.level is None

    def cell_names(self) -> tuple[str, str, str, str]:
        return (self.client, self.scenario, self.setup, self.transport)

    def verdict(self) -> dict[str, str]:
        """What a change is measured on: the level, the protocol negotiated, each checklist
        answer, each of the scenario's checks (by title)."""
        out = {"level": "-" if self.level is None else str(self.level), "protocol": self.protocol}
        out.update(self.answers)
        for check in self.checks:
            out[f"check:{check.get('title') or check.get('key')}"] = str(check.get("answer"))
        return out

    def take_newest(self, newer: ClientEntry) -> None:
        if newer.source not in self.source.split("+"):
            self.source += f"+{newer.source}"
        self.notes, self.runs = newer.notes, newer.runs  # the newest run's
        self.client_info = newer.client_info or self.client_info

    def level_text(self) -> str:
        if self.level is None:
            return "- runner failed" if self.runner_failed else "- not run"
        return f"{self.level} {level_name(self.level)}"

    # -- in the table ---------------------------------------------------------------

    def line_head(self) -> str:
        """Its source and level, after the date, version and lab version."""
        return f" {self.source:<9}  level {self.level_text()}"

    def failed_text(self) -> str:
        why = self.runner_failed or "; ".join(self.notes) or "not run"
        return f"({history_cells.why_text(why)})"

    def answers_text(self) -> str:
        """The verdict in full: each checklist answer, each of the scenario's checks."""
        boxes = [f"{CHECKLIST.get(k, k)} {v}" for k, v in self.answers.items()]
        checks = [f"{c.get('title')} {c.get('answer')}" for c in self.checks]
        return ", ".join(boxes + checks)

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
            "client_info": self.client_info or None,
        }


class ClientChange(history_cells.Change):
    def moved(self, key: str, before: str, after: str) -> str:
        if key == "level":
            return f"level {before} -> {after}"
        return f"{key.removeprefix('check:')}: {before} -> {after}"


@dataclass
class ClientCell(history_cells.Cell[ClientEntry]):
    """One client in one scenario and lab setup, over versions and dates."""

    client: str
    scenario: str
    setup: str
    transport: str = HTTP

    def heading(self) -> str:
        """Its line in the table: the scenario, then the setup and transport."""
        where_run = ", ".join(history_cells.cell_text(v) for v in (self.setup, self.transport))
        return f"{history_cells.cell_text(self.scenario)} ({where_run})"

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        where = {"scenario": self.scenario, "setup": self.setup, "transport": self.transport}
        return {**where, **self.history_json(limit)}


CLIENT_HISTORY: HistoryKind[ClientRow, ClientEntry, ClientCell] = HistoryKind(
    name="client",
    plural="clients",
    table="verdicts",
    columns=tuple(
        "recorded lab_version source client version scenario setup protocol level server_level "
        "answers checks notes runs runner_failed transport client_info".split()
    ),
    values=_client_values,
    entry=ClientEntry.from_stored,
    cell_names=ClientEntry.cell_names,
    cell=ClientCell,
    change=ClientChange,
    heading=ClientCell.heading,
    line_head=ClientEntry.line_head,
    failed=ClientEntry.failed_text,
    summary=ClientEntry.answers_text,
    json_head=lambda found: {"scenarios": sorted({c.scenario for c in found})},
    # A file no lab of schema 3 wrote yet has no transport column: its rows are http's.
    later=(("transport", HTTP), ("client_info", "")),
)
