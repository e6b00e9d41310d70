"""What the file of any program under test shares, whichever its kind: a client file
(:mod:`mcp_lab.runners.clients.definition`) and a bridge file
(:mod:`mcp_lab.runners.bridges.definition`) are both TOML, read the same way, named
the same way, install from the same registries, and fail with one error type."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

# A program's name: what --client, --bridge and --version NAME=X take.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The registries a program installs from (its file's [install]); mcp_lab.runners.install.
NPM, PYPI = "npm", "pypi"


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def origin(self) -> str: ...  # the file it came from ("built in": none)


P = TypeVar("P", bound=_Named)  # a program under test, as its file says


class DefinitionError(ValueError):
    """A program's file that cannot be used: the message names the file and the key."""


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML file ``path``; DefinitionError saying why it cannot be read."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError(f"{path}: not valid TOML: {exc}") from None


def with_files(
    built_in: Mapping[str, P], files: list[Path], load: Callable[[Path], P]
) -> dict[str, P]:
    """The ``built_in`` programs and those of ``files`` (each read by ``load``), by
    name, in that order. DefinitionError for a file that cannot be used, and for one
    whose name is a built-in's (its rows, the history and the export would credit the
    built-in with them), unless it is that built-in's own file."""
    found = dict(built_in)
    for path in files:
        program = load(path)
        theirs = built_in.get(program.name)
        if theirs is not None and not _same_file(path, theirs.origin):
            raise DefinitionError(
                f"{path}: name {program.name!r} is a built-in's ({theirs.origin}); give "
                "your file a name of its own (its rows are kept under that name)"
            )
        found[program.name] = program
    return found


def _same_file(path: Path, origin: str) -> bool:
    try:
        return Path(origin).resolve() == path.resolve()
    except OSError:
        return False
