"""Every scenario the lab knows, by name: the modules of this package, each defining
``SCENARIO``, and any registered at run time (a test's own)."""

from __future__ import annotations

import importlib
import pkgutil

from mcp_lab import scenarios
from mcp_lab.scenarios.scenario import Scenario

DEFAULT = "single"
_KNOWN: dict[str, Scenario] = {}
_loaded = False
# Modules of the package that define the machinery, not a scenario.
_NOT_SCENARIOS = frozenset({"scenario", "registry", "checks"})


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in pkgutil.iter_modules(scenarios.__path__):
        if module.name in _NOT_SCENARIOS:
            continue
        found = importlib.import_module(f"mcp_lab.scenarios.{module.name}").SCENARIO
        register(found)


def register(scenario: Scenario) -> Scenario:
    """Make ``scenario`` known by its name (a name known already is an error)."""
    _load()
    known = _KNOWN.get(scenario.name)
    if known is not None and known is not scenario:
        raise ValueError(f"a scenario named {scenario.name!r} is known already")
    _KNOWN[scenario.name] = scenario
    return scenario


def forget(name: str) -> None:
    """Drop a scenario registered at run time (a test's own, when it ends)."""
    _KNOWN.pop(name, None)


def get(name: str) -> Scenario:
    """The scenario called ``name``; LookupError naming the known ones."""
    _load()
    try:
        return _KNOWN[name]
    except KeyError:
        raise LookupError(f"unknown scenario {name!r} (known: {', '.join(names())})") from None


def names() -> list[str]:
    """Every known scenario's name, the default first, then by name."""
    _load()
    return sorted(_KNOWN, key=lambda n: (n != DEFAULT, n))


def every() -> list[Scenario]:
    return [get(name) for name in names()]
