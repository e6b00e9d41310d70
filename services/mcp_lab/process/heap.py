"""The garbage collector of the lab's processes: one home for how it is run.

Three measured costs, three functions (docs/dev/performance-notebook.md, "Fast path per
request", "Memory and start-up" and "Fan-out"):

* :func:`import_untracked`: imports allocate a few hundred thousand objects and
  free almost none, yet each allocation burst triggers a collection that walks
  them all. Imported with the collector off and then frozen (``gc.freeze``), a
  process starts with ~15-25% less CPU, and later collections skip those objects.
* :func:`tune`: each open session holds a few thousand objects for as long as it
  lasts. With CPython's default thresholds (700, 10, 10) a young collection runs
  every 700 allocations, the objects of sessions being set up survive into the
  old generation, and a full collection (every object of every session) runs
  each time it grew by a quarter: measured with ``gc.callbacks`` during a
  1,000-session storm, 9.1 s of the server's 15.7 s of CPU were the collector,
  7.2 s of them in 15 full collections. Rarer young collections (most objects of
  a request are gone by then) fix that; cycles are still collected.
* :func:`collection_deferred`: a fan-out allocates enough to trigger a
  collection, and a full one with 1,000 sessions held took 0.5-3.6 s of wall
  time on the loaded 2-core benchmark machine; the notifications would wait for
  it. Deferred, it runs after the publish instead; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Iterable, Iterator

# Allocations between young collections; then how many collections of each
# generation before the next one is examined (CPython's defaults: 700, 10, 10).
THRESHOLDS = (50_000, 20, 10)


def import_untracked(modules: Iterable[str]) -> None:
    """Import ``modules`` with the collector off, then freeze what exists and turn
    it back on."""
    gc.disable()
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        gc.freeze()
        gc.enable()


def tune() -> None:
    """Set :data:`THRESHOLDS` and freeze what exists now; call once the app is built.

    No collection first: at that point it finds next to nothing (13 objects of
    117,000 when measured) and would add ~0.1 s to the server's start."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


@contextlib.contextmanager
def collection_deferred() -> Iterator[None]:
    """The cyclic collector paused for the block (a publish going out); the
    collection it would have run happens at the first allocation after it. The
    caller bounds the block (each store and send of a publish has its timeout)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
