"""The order of a client's released versions (npm's ``major.minor.patch[-pre]``)."""

from __future__ import annotations

import re
from typing import Any

_PARTS = re.compile(r"[.-]")


def version_key(version: str) -> tuple[Any, ...]:
    """A sort key for npm-style versions: numbers as numbers, a prerelease
    (``1.2.0-preview.3``) before its release, words after numbers."""
    core, _, pre = version.split("+", 1)[0].partition("-")
    numbers = tuple(_part(p) for p in core.split("."))
    if not pre:
        return (numbers, (1,))
    return (numbers, (0, *(_part(p) for p in _PARTS.split(pre))))


def _part(text: str) -> tuple[Any, ...]:
    """One part of a version: a number compared as one (by its digits without leading
    zeros, shorter first: no ``int()``, which refuses over 4,300 digits), or a word."""
    if not (text.isascii() and text.isdigit()):
        return (1, text)
    digits = text.lstrip("0")
    return (0, len(digits), digits)


def is_prerelease(version: str) -> bool:
    return "-" in version.split("+", 1)[0]
