"""How a run of programs under test says how it goes, for either kind: the progress
lines on stderr (``mcp-lab clients: ...``, ``mcp-lab bridges: ...``), or none
(``--quiet``, a library call), and how many runs go side by side by default."""

from __future__ import annotations

import sys
from collections.abc import Callable

DEFAULT_JOBS = 3  # runs side by side (``--jobs``)
Progress = Callable[[str], None]  # takes one progress line


def quiet(_: str) -> None:
    """A progress that says nothing."""


def on_stderr(command: str) -> Progress:
    """Progress lines on stderr, each after ``mcp-lab COMMAND:``; flushed, so they
    interleave in order with a child's own output."""

    def say(line: str) -> None:
        print(f"mcp-lab {command}: {line}", file=sys.stderr, flush=True)

    return say
