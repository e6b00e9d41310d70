"""What a bridge said when it failed: the line of its output that names the error, not
the usage text many print with it.

A bridge started with options its version does not know (npm ``mcp-proxy`` 5.x with
6.x's command line) prints its whole ``--help`` and then, last, what went wrong (``Not
enough non-option arguments: got 0, need at least 1``); a crash prints a stack after
its error. The row's note quotes that line.
"""

from __future__ import annotations

import re

# A usage text's lines: its headings, its option and positional lines (indented, or a
# column of text continuing one), and the usage line itself (``prog <command> [args]``).
_USAGE = re.compile(
    r"^(?:Usage:?|Options:|Positionals:|Commands:|Examples:)"
    r"|^\s+\S"
    r"|^\S+ (?:\[options\]|<\w+>|\[\w+)"
)
_ERROR = re.compile(
    r"error|not enough|unknown|invalid|missing|required|cannot|can't|could not|failed|"
    r"not found|no such|refused|denied|unexpected|must ",
    re.IGNORECASE,
)
_STACK = re.compile(r"^\s+at |^\s*\^+\s*$|^node:internal")
_CHARS = 240  # the note quotes this much of the line


def bridge_said(lines: list[str]) -> str:
    """The line of ``lines`` (a bridge's output, oldest first) that says what went
    wrong: the last one that reads as an error outside a usage text or stack; else the
    last line that is neither; ``""`` when there is none."""
    told = [line.strip() for line in lines if line.strip() and not _noise(line)]
    errors = [line for line in told if _ERROR.search(line)]
    found = errors[-1] if errors else (told[-1] if told else "")
    return found[:_CHARS]


def _noise(line: str) -> bool:
    return bool(_USAGE.search(line) or _STACK.search(line))
