"""What the runners' commands (``mcp-lab clients`` and ``mcp-lab bridges``) do alike:
read ``--version NAME=X``, refuse unknown names, print the matrix in the format asked,
say where the runs' files and the history are, and the ``history`` subcommand (each
runner's history module gives its rows, cells and renderings)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mcp_lab.runners.history_store import history_path
from mcp_lab.runners.matrix import FORMATS, TABLE, Matrix, formats_help
from mcp_lab.runners.progress import DEFAULT_JOBS


class _InScenario(Protocol):
    scenario: str


R = TypeVar("R")  # a runner's row
E = TypeVar("E", bound=_InScenario)  # a kept entry of a runner's history
C = TypeVar("C")  # a cell of a runner's history


def parse_versions(
    pairs: list[str],
    known: Collection[str],
    kind: str,
    by_version: Callable[[str], bool] = lambda _: True,
) -> dict[str, str]:
    """``--version NAME=VERSION`` overrides, by name; ValueError naming the bad one: not
    NAME=VERSION, a NAME none of ``known`` (each a ``kind``), or one that is not
    installed by version (``by_version(NAME)`` false)."""
    versions: dict[str, str] = {}
    for pair in pairs:
        name, sep, version = pair.partition("=")
        if not sep or not version:
            raise ValueError(f"--version {pair!r}: expected NAME=VERSION")
        if name not in known:
            raise ValueError(
                f"--version {pair!r}: unknown {kind} {name!r} (known: {', '.join(known)})"
            )
        if not by_version(name):
            raise ValueError(f"--version {pair!r}: {name} is not installed by version")
        versions[name] = version
    return versions


def refuse_unknown(names: Sequence[str], known: Collection[str], kind: str) -> bool:
    """Whether any of ``names`` is none of ``known`` (each a ``kind``: client,
    bridge): then said on stderr, and the command exits with code 2."""
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"mcp-lab: unknown {kind}(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
    return bool(unknown)


def add_matrix_options(run: argparse.ArgumentParser, *, docs: str, side_by_side: str) -> None:
    """A runner's ``run`` options that shape its matrix and its progress, alike for
    either kind: ``--format`` (as in ``docs``), ``--jobs`` (what runs side by side:
    ``side_by_side``) and ``--quiet``."""
    run.add_argument("--format", choices=list(FORMATS), default=TABLE, help=formats_help(docs))
    run.add_argument(
        "--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
        help=f"{side_by_side} side by side (default {DEFAULT_JOBS})",
    )  # fmt: skip
    run.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr, only the matrix"
    )


def print_matrix(rows: list[R], form: str, shown: Matrix[R]) -> None:
    """The rows on stdout as ``--format`` asks (:data:`mcp_lab.runners.matrix.FORMATS`)."""
    print(shown.render(rows, form), end="")


def say_where(say: Callable[[str], None], runs: Path, kept: Path | None, command: str) -> None:
    """The progress lines after a run: where its runs' files are, and where its rows
    were kept (``command``: the history command that shows them)."""
    if runs.is_dir() and any(runs.iterdir()):
        say(f"each run's files: {runs}")
    else:
        say("no run got as far as keeping files")
    if kept is not None:
        say(f"kept in the history: {kept} ({command})")


def add_history_parser(
    actions: argparse._SubParsersAction,
    *,
    kind: str,
    summary: str,
    formats: str,
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """``history`` among ``actions``: ``--KIND NAME`` and ``--scenario NAME`` (one of
    each, in ``args.KIND`` and ``args.scenario``), ``--format table|json`` (what each
    gives: ``formats``). Returned, for options of one runner's own."""
    shown = actions.add_parser("history", help=summary)
    shown.add_argument(f"--{kind}", default=None, metavar="NAME", help=f"this {kind} only")
    shown.add_argument("--scenario", default=None, metavar="NAME", help="this scenario only")
    shown.add_argument("--format", choices=["table", "json"], default="table", help=formats)
    shown.set_defaults(func=func)
    return shown


def show_history(
    kind: str,
    name: str | None,
    scenario: str | None,
    form: str,
    *,
    read: Callable[[Path, str | None], list[E]],
    cells: Callable[[list[E]], list[C]],
    to_json: Callable[[list[C], Path], dict[str, Any]],
    to_table: Callable[[list[C], Path], str],
    only: dict[str, str | None] | None = None,
) -> int:
    """``mcp-lab clients|bridges history``: the kept rows (of the ``kind`` ``name``, in
    ``scenario``, and whose other attributes have the values ``only`` names, where
    given) as cells, in the ``form`` asked; exit code 1 when the history cannot be
    read."""
    where = history_path()
    try:
        entries = read(where, name)
    except (sqlite3.Error, OSError) as exc:
        print(f"mcp-lab: the history in {where} could not be read: {exc}", file=sys.stderr)
        return 1
    wanted = {"scenario": scenario, **(only or {})}
    for attribute, value in wanted.items():
        if value is not None:
            entries = [e for e in entries if getattr(e, attribute) == value]
    found = cells(entries)
    if form == "json":
        print(json.dumps(to_json(found, where), indent=2))
    elif not found and (name or any(wanted.values())):
        asked = ((kind, name), *wanted.items())
        said = " and ".join(f"{k} {v}" for k, v in asked if v)
        print(f"nothing kept for {said} in {where}")
    else:
        print(to_table(found, where))
    return 0
