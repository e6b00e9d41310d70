"""mcp-subscribe-lab: does an MCP client handle resource subscriptions?

The public surface, what docs/own-client.md imports; everything else under
``mcp_lab`` is internal and may change:

- :class:`FixtureLab` and :class:`LabVerdict`: a running lab in a test suite (the
  ``mcp_lab`` pytest fixture) and the verdict of a client's sessions;
- :func:`check`, :class:`Verdict`, :class:`CheckError` and :func:`exit_code`: what
  ``mcp-lab check`` runs, from Python.

Each name is imported when first used, so ``import mcp_lab`` costs nothing (the
``mcp-lab`` command starts without loading the lab).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_lab.runners.clients.check import CheckError, Verdict, check, exit_code
    from mcp_lab.runners.clients.fixture_lab import FixtureLab, LabVerdict

# name -> the internal module that defines it
_PUBLIC = {
    "FixtureLab": "mcp_lab.runners.clients.fixture_lab",
    "LabVerdict": "mcp_lab.runners.clients.fixture_lab",
    "check": "mcp_lab.runners.clients.check",
    "Verdict": "mcp_lab.runners.clients.check",
    "CheckError": "mcp_lab.runners.clients.check",
    "exit_code": "mcp_lab.runners.clients.check",
}
__all__ = ["CheckError", "FixtureLab", "LabVerdict", "Verdict", "check", "exit_code"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mcp_lab' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
