"""The server process's garbage collector, tuned for many long-lived sessions.

Each open session holds a few thousand Python objects for as long as it lasts.
With CPython's default thresholds (700, 10, 10) a young collection runs every
700 allocations, and the objects of every session being set up survive into
the old generation, so a full collection (every object of every session) runs
each time that generation grew by a quarter. Measured with ``gc.callbacks`` in
the server during a 1,000-session storm (``scripts/bench.py --only storm``):
9.1 s of its 15.7 s of CPU were the collector, 7.2 s of them in 15 full
collections. See docs/performance.md, "Fast path per request".

:func:`tune` makes young collections rarer (most objects of a request are gone
by the time one runs, so fewer reach the old generations) and moves what exists
at start-up (modules, the app) out of the collector's reach (``gc.freeze``):
they live as long as the process. Cycles are still collected, as before.
"""

from __future__ import annotations

import gc

# Allocations between young collections; then how many collections of each
# generation before the next one is examined (CPython's defaults: 700, 10, 10).
THRESHOLDS = (50_000, 20, 10)


def tune() -> None:
    """Set :data:`THRESHOLDS` and freeze what exists now; call once the app is built.

    No collection first: at that point it finds next to nothing (13 objects of
    117,000 when measured) and would add ~0.1 s to the server's start."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
