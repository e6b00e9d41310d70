"""Reading the evidence a stopped ``mcp-lab up`` kept, with no lab running.

``mcp-lab up`` keeps its embedded Redis's data in the data directory. When no lab
runs (no ``REDIS_URL``, no running ``up``, nothing answering on the default Redis
port), ``mcp-lab report`` reads that data through a throwaway redis-server of its
own, started on a copy of the folder: the kept data is never written to, and the
copy is removed afterwards.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp_lab.process.dirs import default_data_dir
from mcp_lab.process.embedded_redis import start_redis

_START_SECONDS = 30.0


def kept_data(data_dir: Path | None = None) -> Path | None:
    """The data directory, when it holds what an ``up`` kept (else None)."""
    where = data_dir or default_data_dir()
    return where if where.is_dir() and any(where.iterdir()) else None


@contextmanager
def kept_redis(data_dir: Path) -> Iterator[str]:
    """A redis-server of its own on a copy of ``data_dir`` for the duration; its URL."""
    with tempfile.TemporaryDirectory(prefix="mcp-lab-kept-") as scratch:
        copy = Path(scratch) / "redis"
        shutil.copytree(data_dir, copy)
        redis = start_redis(data_dir=copy, timeout=_START_SECONDS)
        try:
            yield redis.url
        finally:
            redis.stop()
