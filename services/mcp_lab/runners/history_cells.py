"""A matrix history's cells: one cell's kept entries over versions and dates, each
change of the verdict marked.

Part of the history that is one piece of code for clients and bridges
(:mod:`mcp_lab.runners.history_kinds` keeps, reads and shows the rows). Each kind has its
own entries (what a row is, what its verdict is measured on) and its own cells (what
names one); a cell here orders its entries as versions, then by date, takes identical
verdicts of one version in a row together, and marks each verdict that differs from the
one before it (an entry without a verdict, a runner's failure, is no change).

What a table of either history prints of a kept row (a client's or bridge's name and
version, which a definition file or a CLI chose, and the texts made of them) goes
through :func:`cell_text`, :func:`note_text` and :func:`why_text`: cut to the limits the
reports use (a cell 60 characters, a note 300, why an entry has no verdict 100) and
escaped, as a terminal reads the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Self, TypeVar

from mcp_lab import untrusted
from mcp_lab.runners.versions import version_key

NOTE_CHARS = 300  # a note, or a verdict's text, in a table (as the reports cut a note)
WHY_CHARS = 100  # why an entry has no verdict, in a table


class Kept(Protocol):
    """What a cell needs of a kept entry (each kind's entry: ``ClientEntry``,
    ``BridgeEntry``)."""

    recorded: str
    lab_version: str
    version: str
    count: int  # identical entries of one version taken together
    last_recorded: str

    @property
    def failed(self) -> bool:
        """No verdict (the runner failed, or nothing was run)."""
        ...

    def verdict(self) -> dict[str, str]:
        """What a change is measured on."""
        ...

    def to_json(self) -> dict[str, Any]: ...

    def take_newest(self, newer: Self) -> None:
        """Take what ``newer``, an identical verdict of the same version, says beyond
        its verdict (its notes, its run folders)."""
        ...


E = TypeVar("E", bound=Kept)


@dataclass
class Change:
    """What changed from one verdict to the next in a cell."""

    version: str
    recorded: str
    previous_version: str
    fields: list[tuple[str, str, str]]  # (key, before, after)

    def moved(self, key: str, before: str, after: str) -> str:
        """One field's change, as text (each history says it its own way)."""
        return f"{key}: {before} -> {after}"

    def text(self) -> str:
        return f"{self.version}: {'; '.join(self.moved(*f) for f in self.fields)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "previous_version": self.previous_version,
            "recorded": self.recorded,
            "text": self.text(),
            "fields": [{"key": k, "before": a, "after": b} for k, a, b in self.fields],
        }


@dataclass
class Cell(Generic[E]):
    """A cell's entries, in version order then by date, and per entry what changed.
    Each history's cell adds the names of the cell (before these, in its fields)."""

    entries: list[E] = field(default_factory=list, kw_only=True)
    changes: list[Change | None] = field(default_factory=list, kw_only=True)

    def fill(self, found: Iterable[E], change: type[Change]) -> Self:
        """Take ``found`` (the cell's entries, in any order) as its entries and mark its
        changes, each a ``change``."""
        ordered = sorted(found, key=lambda e: (version_key(e.version), e.recorded))
        self.entries = list(_merged(ordered))
        previous: E | None = None
        for entry in self.entries:
            made = None
            if not entry.failed and previous is not None:
                fields = differences(previous.verdict(), entry.verdict())
                if fields:
                    made = change(entry.version, entry.recorded, previous.version, fields)
            self.changes.append(made)
            if not entry.failed:
                previous = entry
        return self

    @property
    def latest(self) -> E:
        """Of the highest version run, its most recent entry (a runner failure only when
        there is nothing else: it says nothing of what was run)."""
        told = [e for e in self.entries if not e.failed] or self.entries
        return max(told, key=lambda e: (version_key(e.version), e.last_recorded))

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        """The cell as JSON: each history's cell puts its names (but the program's)
        before :meth:`history_json`."""
        return self.history_json(limit)

    def history_json(self, limit: int | None = None) -> dict[str, Any]:
        """The latest entry, the entries (the newest ``limit``) each with its change, the
        changes, and how many entries were left out."""
        pairs = list(zip(self.entries, self.changes, strict=True))
        if limit is not None:
            pairs = pairs[-limit:]
        return {
            "latest": self.latest.to_json(),
            "entries": [
                {**e.to_json(), "change": None if c is None else c.to_json()} for e, c in pairs
            ],
            "changes": [c.to_json() for _, c in pairs if c is not None],
            "entries_left_out": len(self.entries) - len(pairs),
        }


def by_cell(
    entries: Iterable[E], names: Callable[[E], tuple[str, ...]]
) -> list[tuple[tuple[str, ...], list[E]]]:
    """``entries`` grouped by the names of their cell, in the order of those names."""
    grouped: dict[tuple[str, ...], list[E]] = {}
    for entry in entries:
        grouped.setdefault(names(entry), []).append(entry)
    return [(key, grouped[key]) for key in sorted(grouped)]


def _merged(ordered: list[E]) -> Iterator[E]:
    held: E | None = None
    for entry in ordered:
        if (
            held is not None
            and held.version == entry.version
            and held.failed == entry.failed
            and held.verdict() == entry.verdict()
        ):
            held.count += 1
            held.last_recorded = entry.recorded
            held.take_newest(entry)
            continue
        if held is not None:
            yield held
        held = entry
        held.last_recorded = entry.recorded
    if held is not None:
        yield held


def differences(before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str, str]]:
    """Each key whose value differs (a key only one side has: ``-`` on the other), in
    the order of ``before``, then the keys only ``after`` has."""
    keys = list(before) + [k for k in after if k not in before]
    return [
        (k, before.get(k, "-"), after.get(k, "-"))
        for k in keys
        if before.get(k, "-") != after.get(k, "-")
    ]


def cell_text(text: str) -> str:
    """A name, version, scenario or setup as a table prints it: cut to a report's cell
    (``untrusted.TABLE_CELL_CHARS``), escaped."""
    return untrusted.shown(text, untrusted.TABLE_CELL_CHARS)


def note_text(text: str) -> str:
    """A note, failure or verdict's text as a table prints it: cut to :data:`NOTE_CHARS`,
    escaped."""
    return untrusted.shown(text, NOTE_CHARS)


def why_text(text: str) -> str:
    """Why an entry has no verdict (a runner's failure, the notes) as a table prints it:
    cut to :data:`WHY_CHARS`, escaped."""
    return untrusted.shown(text, WHY_CHARS)


# The JSON's fields that name something (a table's cells): cut as a table cuts a name.
_NAMING = frozenset(
    "client bridge version previous_version scenario setup transport protocol".split()
)


def json_cut(value: Any, key: str = "") -> Any:
    """``value`` (the history's JSON) with every string cut as the table cuts it: a
    name, version, scenario or setup (``key`` one of :data:`_NAMING`, or a dict's key)
    to a report's cell, any other text to :data:`NOTE_CHARS`. JSON escapes control
    characters itself, so nothing more is escaped here."""
    if isinstance(value, str):
        limit = untrusted.TABLE_CELL_CHARS if key in _NAMING else NOTE_CHARS
        return untrusted.cut(value, limit)
    if isinstance(value, dict):
        return {
            untrusted.cut(str(k), untrusted.TABLE_CELL_CHARS): json_cut(v, str(k))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [json_cut(item, key) for item in value]
    return value


def when(entry: Kept) -> str:
    """An entry's date as a table shows it: ``2026-12-01 10:00``, and for identical
    entries taken together ``2026-12-01 10:00 (+2 more to 2026-12-03)``."""
    first = entry.recorded[:16].replace("T", " ")
    if entry.count == 1:
        return first
    return f"{first} (+{entry.count - 1} more to {entry.last_recorded[:10]})"
