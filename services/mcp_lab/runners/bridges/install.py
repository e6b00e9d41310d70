"""Installing a bridge once per version into the bridges' cache.

npm bridges go into a prefix of their own, as the clients do
(:func:`mcp_lab.runners.install.npm_install`); a PyPI bridge into a virtualenv of
its own, ``<cache>/<name>-<version>/`` (its dependencies never meet the lab's); FastMCP's
proxy is the installed fastmcp, run by this Python.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version as installed_version

from mcp_lab.runners.bridges.specs import FASTMCP, LOCAL, NPM, PYPI, BridgeSpec, fastmcp_program
from mcp_lab.runners.install import (
    BRIDGES_CACHE,
    LATEST,
    InstallError,
    cache_dir,
    npm_install,
    pypi_install,
    pypi_latest,
    resolve_version,
)


def resolve(spec: BridgeSpec, version: str) -> str:
    """The version to run: ``version``, the registry's newest for ``latest``, the
    installed fastmcp's for FastMCP's proxy."""
    if spec.source == FASTMCP:
        return installed_version("fastmcp")
    if version != LATEST or spec.package is None:
        return version
    if spec.source == NPM:
        return resolve_version(spec.package, version)
    return pypi_latest(spec.package)


def _bridge_program(spec: BridgeSpec, version: str) -> list[str]:
    if spec.source == FASTMCP:
        return fastmcp_program()
    name = spec.install_name or spec.name  # two specs of one package share an install
    cache = cache_dir(BRIDGES_CACHE)
    if spec.source == NPM:
        assert spec.package is not None
        return [str(npm_install(name, spec.package, version, spec.binary, cache=cache))]
    if spec.source == PYPI:
        assert spec.package is not None
        return [str(pypi_install(name, spec.package, version, spec.binary, cache=cache))]
    raise InstallError(f"{spec.name}: a {spec.source} bridge is not installed ({LOCAL}: a test's)")


# One install of a name and version at a time (two specs of one package share it), per
# event loop (a lock belongs to the loop that first waits on it).
_INSTALLING: dict[tuple[int, str, str], asyncio.Lock] = {}


async def install_bridge(spec: BridgeSpec, version: str) -> tuple[str, list[str]]:
    """The version that runs and the program (argv prefix) that starts the bridge."""
    resolved = await asyncio.to_thread(resolve, spec, version)
    key = (id(asyncio.get_running_loop()), spec.install_name or spec.name, resolved)
    async with _INSTALLING.setdefault(key, asyncio.Lock()):
        return resolved, await asyncio.to_thread(_bridge_program, spec, resolved)
