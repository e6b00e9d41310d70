"""The matrix history's file: where it is, its schema (and its upgrades), how it is
opened, and its rows written and read (:func:`insert`, :func:`rows`, :func:`keep`).

One SQLite file keeps every row of ``mcp-lab clients run`` / ``sweep`` (table
``verdicts``) and of ``mcp-lab bridges run`` (table ``bridge_verdicts``), written and read
by the history that is one piece of code for both kinds
(:class:`mcp_lab.runners.history_kinds.HistoryKind`; each kind's columns are its kind
object's, in ``runners/clients/history.py`` and ``runners/bridges/history.py``).
docs/history.md says why SQLite, and why the bridges have a table of their own.

The schema's version is the file's ``PRAGMA user_version``. A writer brings the file up
to :data:`SCHEMA_VERSION` before it writes: each step of :data:`_MIGRATIONS` above the
file's version is applied, in order, in one transaction. Every step only adds (a table,
an index, a column), and each is idempotent (``IF NOT EXISTS``, or a column added only
where it is missing), so a lab of an older version
(which knows only the steps up to its own and sets ``user_version`` back to it) still
reads and writes a newer file, and the next newer writer applies the steps again at no
cost. Readers open the file read-only and never upgrade it: a table not there yet
reads as empty.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from mcp_lab.process.dirs import default_data_dir

HISTORY_ENV = "MCP_LAB_HISTORY"
_LOCK_TIMEOUT = 30.0

_CLIENTS = """
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded TEXT NOT NULL,
    lab_version TEXT NOT NULL,
    source TEXT NOT NULL,
    client TEXT NOT NULL,
    version TEXT NOT NULL,
    scenario TEXT NOT NULL,
    setup TEXT NOT NULL,
    protocol TEXT NOT NULL,
    level INTEGER,
    server_level INTEGER,
    answers TEXT NOT NULL,
    checks TEXT NOT NULL,
    notes TEXT NOT NULL,
    runs TEXT NOT NULL,
    runner_failed TEXT
);
CREATE INDEX IF NOT EXISTS verdicts_cell ON verdicts (client, scenario, setup);
"""
_BRIDGES = """
CREATE TABLE IF NOT EXISTS bridge_verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recorded TEXT NOT NULL,
    lab_version TEXT NOT NULL,
    bridge TEXT NOT NULL,
    version TEXT NOT NULL,
    direction TEXT NOT NULL,
    scenario TEXT NOT NULL,
    client_protocol TEXT NOT NULL,
    lab_protocol TEXT NOT NULL,
    lab_level INTEGER,
    steps TEXT NOT NULL,
    notes TEXT NOT NULL,
    runs TEXT NOT NULL,
    failure TEXT,
    seconds REAL
);
CREATE INDEX IF NOT EXISTS bridge_verdicts_cell ON bridge_verdicts (bridge, direction, scenario);
"""


def _transport(db: sqlite3.Connection) -> None:
    """The clients' rows gain their transport (rows kept before it: http)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(verdicts)")}
    if "transport" not in columns:  # idempotent, as every step: see the module docstring
        db.execute("ALTER TABLE verdicts ADD COLUMN transport TEXT NOT NULL DEFAULT 'http'")


def _client_info(db: sqlite3.Connection) -> None:
    """The clients' rows gain the clientInfo their client sent, ``name/version`` (rows
    kept before it: '', unknown)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(verdicts)")}
    if "client_info" not in columns:
        db.execute("ALTER TABLE verdicts ADD COLUMN client_info TEXT NOT NULL DEFAULT ''")


# Schema version -> what it adds to the one before it (statements, or a step of its own).
_MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {
    1: _CLIENTS,  # the clients' verdicts
    2: _BRIDGES,  # the bridges' rows
    3: _transport,  # the transport of each client row (http, stdio)
    4: _client_info,  # the clientInfo each client row's client sent
}
SCHEMA_VERSION = max(_MIGRATIONS)


def history_path() -> Path:
    """Where the history is: ``MCP_LAB_HISTORY``, else ``history.sqlite3`` in the lab's
    data directory."""
    named = os.environ.get(HISTORY_ENV)
    if named:
        return Path(named).expanduser()
    return default_data_dir().parent / "history.sqlite3"


def lab_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp-subscribe-lab")
    except PackageNotFoundError:
        return "-"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def schema_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def upgrade(db: sqlite3.Connection) -> int:
    """Bring the file to :data:`SCHEMA_VERSION` (a new file: every step); returns the
    version it had. Never lowers it (a newer lab's file stays as it is)."""
    db.execute("BEGIN IMMEDIATE")  # one upgrader at a time; the others wait, then skip
    try:
        found = schema_version(db)
        for step in sorted(v for v in _MIGRATIONS if v > found):
            migration = _MIGRATIONS[step]
            if callable(migration):
                migration(db)
                continue
            for statement in migration.split(";"):
                if statement.strip():
                    db.execute(statement)
        if found < SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return found


def open_for_writing(where: Path) -> sqlite3.Connection:
    """The history at ``where``, created or upgraded, for the caller's inserts (use it
    as ``with closing(db), db:``)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(where, timeout=_LOCK_TIMEOUT, isolation_level=None)
    try:
        upgrade(db)
    except BaseException:
        db.close()
        raise
    db.isolation_level = "DEFERRED"  # back to transactions the sqlite3 module opens
    return db


def open_for_reading(where: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{where.resolve().as_uri()}?mode=ro", uri=True)


def select(where: Path, query: str, args: tuple[str, ...] = ()) -> list[tuple[object, ...]]:
    """The rows of ``query`` in the file at ``where``, opened read-only; none when there
    is no file, or no such table in it yet (a file of an older schema)."""
    if not where.exists():
        return []
    with closing(open_for_reading(where)) as db:
        try:
            return db.execute(query, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise


def insert(where: Path, table: str, columns: str, values: Sequence[tuple[object, ...]]) -> None:
    """Add ``values`` (one tuple per row, in the order of ``columns``, names separated
    by ", ") to ``table`` of the file at ``where``, created or upgraded first, in one
    transaction."""
    marks = ", ".join("?" * len(columns.split(", ")))
    with closing(open_for_writing(where)) as db, db:
        db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)


def columns_of(where: Path, table: str) -> set[str]:
    """The columns ``table`` of the file at ``where`` has (none: no file or table)."""
    return {str(row[1]) for row in select(where, f"PRAGMA table_info({table})")}


def rows(where: Path, table: str, columns: str, **equal: str | None) -> list[tuple[object, ...]]:
    """``columns`` of every row of ``table`` (oldest first) whose columns named in
    ``equal`` have the values given (a None: any value); see :func:`select`."""
    asked = {column: value for column, value in equal.items() if value is not None}
    query = f"SELECT {columns} FROM {table}"
    if asked:
        query += " WHERE " + " AND ".join(f"{column} = ?" for column in asked)
    return select(where, query + " ORDER BY id", tuple(asked.values()))


def keep(write: Callable[[], Path], who: str) -> Path | None:
    """``write()`` (a kind's ``record`` of a command's rows), and the file it wrote;
    a history that cannot be written is said (by ``who``) and gives None: the command
    goes on (its rows are printed all the same)."""
    try:
        return write()
    except (sqlite3.Error, OSError) as exc:
        print(f"{who}: the history could not be written: {exc}", file=sys.stderr)
        return None
