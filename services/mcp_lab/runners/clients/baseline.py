"""``mcp-lab check --baseline FILE``: the known failures of a client, held against its
checks (:mod:`mcp_lab.runners.clients.requirements`), as the conformance suite's
expected-failures file is.

The file is JSON::

    {"expected_failures": [
        {"scenario": "template", "check": "client-reads-resource",
         "client": "ideal-client", "reason": "reads only the URI it is given"}
    ]}

``client`` is optional (the entry then holds for any client), ``reason`` is for the
reader. A check that is not ``SUCCESS`` (``FAILURE`` or ``NOT_TESTABLE``) is a failure.
The comparison fails on a failure no entry lists (a new one) and on an entry whose
check now passes (a stale one: remove it); it passes when the failures are exactly the
baseline's. An entry for a scenario the check did not play is not judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_lab.runners.clients import requirements
from mcp_lab.scenarios import registry
from mcp_lab.untrusted import escape_controls

if TYPE_CHECKING:
    from mcp_lab.runners.clients.check import Verdict

_FIELDS = frozenset({"client", "scenario", "check", "reason"})


class BaselineError(ValueError):
    """The baseline file cannot be used (a usage error: exit code 2)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One expected failure."""

    scenario: str
    check: str
    client: str | None = None

    def matches(self, client: str, scenario: str, check: str) -> bool:
        return (
            self.scenario == scenario
            and self.check == check
            and (self.client is None or self.client == client)
        )

    def label(self) -> str:
        who = f"{self.client} in " if self.client else ""
        return f"{who}{self.scenario}: {self.check}"


@dataclass(frozen=True)
class Baseline:
    path: Path
    entries: tuple[Entry, ...]


def load(path: Path) -> Baseline:
    """The baseline in ``path``; BaselineError saying what is wrong with it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"the baseline {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("expected_failures"), list):
        raise BaselineError(f'the baseline {path} needs {{"expected_failures": [...]}}')
    entries = [_entry(path, index, item) for index, item in enumerate(data["expected_failures"])]
    return Baseline(path, tuple(entries))


def _entry(path: Path, index: int, item: Any) -> Entry:
    where = f"the baseline {path}, entry {index + 1}"
    if not isinstance(item, dict):
        raise BaselineError(f"{where}: not an object")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise BaselineError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for name in ("scenario", "check"):
        if not isinstance(item.get(name), str):
            raise BaselineError(f"{where}: {name!r} must be a string")
    client = item.get("client")
    if client is not None and not isinstance(client, str):
        raise BaselineError(f"{where}: 'client' must be a string")
    scenario, check = item["scenario"], item["check"]
    try:
        registry.get(scenario)
    except LookupError as exc:
        raise BaselineError(f"{where}: {exc}") from None
    req = requirements.BY_ID.get(check)
    if req is None:
        raise BaselineError(
            f"{where}: unknown check {check!r} (known: {', '.join(requirements.ids())})"
        )
    if not req.applies(scenario):
        raise BaselineError(f"{where}: {check} is not a check of scenario {scenario}")
    return Entry(scenario, check, client)


@dataclass
class Outcome:
    """The comparison: one line each, and whether it passed."""

    known: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # runs with no checks to compare

    @property
    def passed(self) -> bool:
        return not (self.new or self.stale or self.errors)

    def lines(self, path: Path) -> list[str]:
        said = [*self.errors, *self.new, *self.stale, *self.known]
        if self.passed:
            said.append(f"baseline {path}: the failures are exactly its {len(self.known)}")
        else:
            said.append(
                f"baseline {path}: {len(self.new)} new failure(s), {len(self.stale)} stale "
                f"entr{'y' if len(self.stale) == 1 else 'ies'}"
                + (f", {len(self.errors)} run(s) not judged" if self.errors else "")
            )
        return [escape_controls(line) for line in said]


def compare(baseline: Baseline, verdicts: list[Verdict]) -> Outcome:
    """Each verdict's checks against ``baseline``."""
    outcome = Outcome()
    for verdict in verdicts:
        row = verdict.row
        if row.runner_failed:
            outcome.errors.append(
                f"not judged: {row.client} in {row.scenario}: the runner failed: "
                f"{row.runner_failed}"
            )
            continue
        for check in requirements.judged(row):
            entry = next(
                (e for e in baseline.entries if e.matches(row.client, row.scenario, check["id"])),
                None,
            )
            label = f"{row.client} in {row.scenario}: {check['id']}"
            if check["status"] == requirements.SUCCESS:
                if entry is not None:
                    outcome.stale.append(
                        f"stale: {label} now passes; remove it from {baseline.path}"
                    )
            elif entry is not None:
                outcome.known.append(f"known failure: {label} {check['status']}")
            else:
                outcome.new.append(f"new failure: {label} {check['status']}: {check['details']}")
    return outcome


def judge(baseline: Baseline, verdicts: list[Verdict]) -> tuple[int, list[str]]:
    """The exit code (0 when the failures are exactly the baseline's, else 1) and the
    lines that say why, one for each failure and stale entry."""
    outcome = compare(baseline, verdicts)
    return (0 if outcome.passed else 1), outcome.lines(baseline.path)
