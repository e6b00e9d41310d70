"""``mcp-lab check``: a fresh lab, one client, one verdict, for a CI job.

The client is a command line (``--command``), a client file (``--client-file``) or a
built-in client (``--client``); it runs through the clients runner as any client does
(:func:`mcp_lab.runners.clients.runner.run_client`: a fresh lab, the wire tap, the
lab's own evidence), over one transport, in each scenario asked for. Each scenario's
row is one verdict; the check passes when every verdict reaches ``expect``.

The renderings: a table for a person, JSON for a script, and JUnit XML for a CI
system (one test suite per scenario, one test case per checklist item: an item the
expected level needs fails when it was not reached, one beyond it is skipped). The
conformance-style checks, one per requirement, and the baseline of known failures are
:mod:`~mcp_lab.runners.clients.requirements` and :mod:`~mcp_lab.runners.clients.baseline`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

from mcp_lab.runners import run_folders
from mcp_lab.runners.clients import runner
from mcp_lab.runners.clients.definition import ClientDef
from mcp_lab.runners.clients.matrix import CHECKLIST, ClientRow, level_name
from mcp_lab.runners.install import CLIENTS_CACHE, cache_dir
from mcp_lab.scenarios.scenario import Scenario
from mcp_lab.untrusted import escape_controls

EXIT_PASSED, EXIT_BELOW, EXIT_ERROR = 0, 1, 2  # the exit codes
DEFAULT_EXPECT = 6
CHECK_TIMEOUT = 120.0
# The level each checklist item gives (reflected: 7, only for a client with a model).
_ITEM_LEVELS = {box: level for level, box in enumerate(CHECKLIST, start=1) if level <= 7}
_REACHED = frozenset({"yes", "push", "notice"})


class CheckError(RuntimeError):
    """The check could not run (a usage or start-up error): exit code 2."""


@dataclass
class Verdict:
    """One scenario's row, held against the expected level."""

    row: ClientRow
    expect: int

    @property
    def passed(self) -> bool:
        return self.row.level is not None and self.row.level >= self.expect

    @property
    def checklist(self) -> dict[str, bool | None]:
        """Each checklist item, reached or not (``pull`` is never one of them); None
        where the row has no answer (a client that never ran answers none)."""
        return {
            box: self.row.checklist[box].answer in _REACHED if box in self.row.checklist else None
            for box in _ITEM_LEVELS
        }

    def to_json(self) -> dict[str, Any]:
        row = self.row
        return {
            "client": row.client,
            "client_info": row.client_info,
            "scenario": row.scenario,
            "transport": row.transport,
            "protocol": row.protocol,
            "level": row.level,
            "level_name": level_name(row.level) if row.level is not None else row.no_level,
            "expect": self.expect,
            "passed": self.passed,
            "checklist": self.checklist,
            "notes": row.notes,
            "runs": row.runs,
            "seconds": row.seconds,
        }


async def check(
    client: ClientDef,
    scenarios: list[Scenario],
    *,
    transport: str,
    expect: int = DEFAULT_EXPECT,
    timeout: float = CHECK_TIMEOUT,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Verdict]:
    """``client`` against a fresh lab in each of ``scenarios`` over ``transport``; its
    verdicts. CheckError when it could not be run at all (not installable, a command
    that cannot start, a transport it does not speak, a lab that did not start)."""
    if transport not in client.transports:
        raise CheckError(f"{client.name} does not speak {transport} "
                         f"(its file says: {', '.join(client.transports)})")  # fmt: skip
    with run_folders.invocation(run_folders.runs_of("clients", cache_dir(CLIENTS_CACHE))) as runs:
        rows = await runner.run_client(
            client,
            client.version,
            scenarios,
            runs=runs,
            tool="off",
            timeout=timeout,
            progress=progress,
            transport=transport,
        )
    for row in rows:
        if row.runner_failed and _start_error(row.runner_failed):
            raise CheckError(f"{client.name} could not be started: {row.runner_failed}")
    if len(rows) == 1 and rows[0].scenario == "-":  # not installable, no transport
        raise CheckError(f"{client.name}: {'; '.join(rows[0].notes)}")
    return [Verdict(row, expect) for row in rows]


def _start_error(why: str) -> bool:
    """A runner failure that means the client or the lab never started."""
    return why.startswith(
        ("install failed", "command not found", "could not run", "the lab did not start")
    )


def exit_code(verdicts: list[Verdict]) -> int:
    return EXIT_PASSED if verdicts and all(v.passed for v in verdicts) else EXIT_BELOW


def to_table(verdicts: list[Verdict]) -> str:
    lines = []
    for verdict in verdicts:
        row = verdict.row
        level = "-" if row.level is None else f"{row.level} {level_name(row.level)}"
        mark = "PASS" if verdict.passed else "FAIL"
        who = escape_controls(row.client_info if row.client_info != "-" else row.client)
        lines.append(
            f"{mark}  {who} "
            f"in {row.scenario} over {row.transport}: level {level} "
            f"(expected at least {verdict.expect})"
        )
        for box, reached in verdict.checklist.items():
            if box == "reflected" and (box not in row.checklist or not row.model):
                continue  # no model: level 7 cannot be observed
            answer = row.checklist[box].cell() if box in row.checklist else "-"
            lines.append(f"  [{'x' if reached else ' '}] {CHECKLIST[box]:<10} {answer}")
        for note in row.notes:  # a note may quote what the client chose: one line each
            lines.append(f"  - {escape_controls(note)}")
        if row.runs:
            lines.append(f"  files: {', '.join(row.runs.values())}")
    return "\n".join(lines)


def to_json(verdicts: list[Verdict]) -> str:
    passed = exit_code(verdicts) == EXIT_PASSED
    data = {"passed": passed, "verdicts": [v.to_json() for v in verdicts]}
    return json.dumps(data, indent=2)


# What XML 1.0 cannot hold at all, even as a character reference: the controls but tab,
# newline and return, the surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    """``text`` (a client chose it) as XML can hold it: each character XML 1.0 cannot
    hold written as ``\\uXXXX`` (``ET.tostring`` writes it raw, and the file does not
    parse)."""
    return _NOT_XML.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _notes(row: ClientRow) -> str:
    """The row's notes for XML: a control character a client chose is not valid there."""
    return _xml("\n".join(escape_controls(note) for note in row.notes))


def to_junit(verdicts: list[Verdict]) -> str:
    """JUnit XML: a test suite per scenario, a test case per checklist item, and one
    for the level itself."""
    suites = ET.Element("testsuites", name="mcp-lab check")
    for verdict in verdicts:
        row = verdict.row
        suite = ET.SubElement(
            suites, "testsuite", name=_xml(f"{row.client} {row.scenario} ({row.transport})")
        )
        cases = 0
        failures = skipped = 0
        for box, reached in verdict.checklist.items():
            if box == "reflected" and not row.model:
                continue  # no model: level 7 cannot be observed
            cases += 1
            case = ET.SubElement(suite, "testcase", classname=suite.get("name", ""),
                                 name=f"{_ITEM_LEVELS[box]} {CHECKLIST[box]}")  # fmt: skip
            if reached:
                continue
            if _ITEM_LEVELS[box] <= verdict.expect:
                failures += 1
                failure = ET.SubElement(case, "failure", message=f"{CHECKLIST[box]}: not reached")
                failure.text = _notes(row)
            else:
                skipped += 1
                ET.SubElement(case, "skipped", message=f"not needed for level {verdict.expect}")
        cases += 1
        level = ET.SubElement(suite, "testcase", classname=suite.get("name", ""),
                              name=f"level at least {verdict.expect}")  # fmt: skip
        if not verdict.passed:
            failures += 1
            got = "-" if row.level is None else str(row.level)
            failure = ET.SubElement(level, "failure", message=f"level {got} < {verdict.expect}")
            failure.text = _notes(row)
        suite.set("tests", str(cases))
        suite.set("failures", str(failures))
        suite.set("skipped", str(skipped))
        suite.set("time", f"{row.seconds:.1f}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
