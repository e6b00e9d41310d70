"""A client ready to run: installed once per version into the clients' cache (npm or
PyPI, through :mod:`mcp_lab.runners.install`, with Node 22 beside it where the client
needs it), or found on this machine (a client file's ``command``)."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.definition import COMMAND, INSPECTOR, NPM, ClientDef
from mcp_lab.runners.install import (
    CLIENTS_CACHE,
    LATEST,
    NODE22_VERSION,
    InstallError,
    cache_dir,
    node22_package,
    npm_install,
    pypi_install,
    pypi_latest,
    resolve_version,
)


@dataclass(frozen=True)
class Installed:
    """A client ready to run: its binary, what goes first on PATH, how to drive it
    (None: the Inspector's own steps), the version that runs."""

    binary: Path
    paths: list[Path]
    driver: drivers.Driver | None
    version: str


def _found(spec: ClientDef) -> Path:
    """A client file's ``command``: a path, or a program on PATH."""
    assert spec.package is not None
    program = shlex.split(spec.package)[0]
    path = Path(program).expanduser()
    if os.sep in program and path.exists():
        return path
    found = shutil.which(program)
    if found is None:
        raise InstallError(f"{program!r} is not on PATH ({spec.origin})")
    return Path(found)


def _ready_client(
    spec: ClientDef, version: str, reinstall: bool = False
) -> tuple[str, Path, list[Path]]:
    """The version that runs, its binary, and the directories put first on PATH;
    ``reinstall``: the client's install made again (not Node 22's)."""
    if spec.source == COMMAND:
        binary = _found(spec)
        return spec.version, binary, [binary.parent]
    assert spec.package is not None
    cache = cache_dir(CLIENTS_CACHE)
    if spec.source == NPM:
        version = resolve_version(spec.package, version)
        binary = npm_install(
            spec.name,
            spec.package,
            version,
            spec.binary,
            spec.local_postinstall,
            cache=cache,
            packages=spec.packages,
            reinstall=reinstall,
        )
    else:
        version = pypi_latest(spec.package, spec.python) if version == LATEST else version
        binary = pypi_install(
            spec.name,
            spec.package,
            version,
            spec.binary,
            cache=cache,
            python=spec.python,
            constraints=spec.constraints,
            packages=spec.packages,
            reinstall=reinstall,
        )
    paths = [binary.parent]
    if spec.needs_node22:
        node = npm_install("node", node22_package(), NODE22_VERSION, "node", cache=cache)
        paths.insert(0, node.parent)
    return version, binary, paths


async def install_client(spec: ClientDef, version: str, reinstall: bool = False) -> Installed:
    """``spec`` at ``version`` (``latest``: the registry's newest now), ready to run
    (``reinstall``: installed again, over the cached install); InstallError saying why
    not."""
    resolved, binary, paths = await asyncio.to_thread(_ready_client, spec, version, reinstall)
    driver = None if spec.kind == INSPECTOR else drivers.templated(spec)
    return Installed(binary, paths, driver, resolved)
