"""pip's install, run with a line of progress while it works and its noise filtered.

The first ``dev.py up`` or ``test`` installs the project and its test tools into
``.venv``: a minute or two, during which ``pip --quiet`` prints nothing. This says
what runs and how long it has run, every :data:`TICK_SECONDS`. It also leaves out
setuptools' warning box about editable installs ("Please be careful with folders in
your working directory..."), which every ``pip install -e`` prints and which reads
like a failure; every other line pip writes comes through.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO

TICK_SECONDS = 15.0
_BOX_START = "BuildBackendWarning: Editable installation"
_BOX_FENCE = "!!"


def without_editable_warning(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` without setuptools' editable-installation warning box: its first line,
    everything up to its closing ``!!`` and the source line Python shows after it."""
    skipping = False
    fences = 0
    after_box = False
    for line in lines:
        if after_box:
            after_box = False
            if line[:1].isspace() and line.strip():
                continue  # the source line of the warning
        if not skipping and _BOX_START in line:
            skipping, fences = True, 0
            continue
        if skipping:
            if line.strip() == _BOX_FENCE:
                fences += 1
                if fences == 2:
                    skipping, after_box = False, True
            continue
        yield line


def _forward(stream: IO[str], to: IO[str]) -> None:
    for line in without_editable_warning(stream):
        to.write(line)
        to.flush()


def run(command: list[str], what: str, every: float = TICK_SECONDS) -> int:
    """Run ``command`` (a pip install), its output filtered, saying ``dev: still
    <what> (N s)`` every ``every`` seconds while it runs; returns its exit code."""
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert process.stdout is not None
    reader = threading.Thread(target=_forward, args=(process.stdout, sys.stderr), daemon=True)
    reader.start()
    while True:
        try:
            code = process.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            print(f"dev: still {what} ({elapsed:.0f} s)", flush=True)
    reader.join(timeout=5)
    process.stdout.close()
    return code
