"""``mcp-lab``'s entry point (the console script and ``python -m mcp_lab``).

It imports nothing before it can catch a Ctrl-C: a SIGINT at any moment of any
command, its imports included, ends it with one line and exit code 130, not a
traceback. (Python's own start, before this module runs, cannot catch one: ``mcp-lab
up`` stops its children with SIGTERM for that reason.)
"""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130


def main() -> None:
    """Run ``mcp-lab`` (:func:`mcp_lab.cli.main.main`); a Ctrl-C says one line."""
    try:
        from mcp_lab.cli.main import main as run

        run()
    except KeyboardInterrupt:
        _say_interrupted()
        sys.exit(INTERRUPTED_EXIT)


def _say_interrupted() -> None:
    try:
        print("mcp-lab: interrupted", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr already closed (a pipe whose reader is gone)
        pass
