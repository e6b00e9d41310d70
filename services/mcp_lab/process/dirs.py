"""The lab's per-user folders (XDG): where ``up`` keeps its runtime file and its data.

``$XDG_STATE_HOME/mcp-lab`` (default ``~/.local/state/mcp-lab``) holds the runtime
file of a running ``up``; ``$XDG_DATA_HOME/mcp-lab`` (default
``~/.local/share/mcp-lab``) the embedded Redis's data and the runners' history.
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable, "")
    base = Path(value) if os.path.isabs(value) else Path.home() / fallback
    return base / "mcp-lab"


def state_dir() -> Path:
    """Per-user state directory of the lab (the runtime file lives here)."""
    return _xdg("XDG_STATE_HOME", ".local/state")


def default_data_dir() -> Path:
    """Where ``mcp-lab up`` keeps its embedded Redis's data by default."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "redis"
