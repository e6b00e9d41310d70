"""Installing a bridge once per version into the bridges' cache.

npm bridges go into a prefix of their own, as the clients do
(:func:`services.runners.install.npm_install`); a PyPI bridge into a virtualenv of
its own, ``<cache>/<name>-<version>/`` (its dependencies never meet the lab's); FastMCP's
proxy is the installed fastmcp, run by this Python.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from importlib.metadata import version as installed_version
from pathlib import Path

from services.runners.bridges.specs import FASTMCP, LOCAL, NPM, PYPI, BridgeSpec, fastmcp_program
from services.runners.install import LATEST, InstallError, checked, npm_install, resolve_version

_PIP_VERSIONS = re.compile(r"^\S+ \(([0-9A-Za-z.+-]+)\)")


def cache_dir() -> Path:
    """Where bridges and their runs' files go (``MCP_LAB_BRIDGES_CACHE`` moves it)."""
    base = os.environ.get("MCP_LAB_BRIDGES_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "mcp-lab" / "bridges"


def _pypi_latest(package: str) -> str:
    out = checked(
        [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", package],
        f"pip index versions {package}",
    )
    found = _PIP_VERSIONS.match(out.strip())
    if found is None:
        raise InstallError(f"pip index versions {package} named no version: {out[:200]!r}")
    return found.group(1)


def resolve(spec: BridgeSpec, version: str) -> str:
    """The version to run: ``version``, the registry's newest for ``latest``, the
    installed fastmcp's for FastMCP's proxy."""
    if spec.source == FASTMCP:
        return installed_version("fastmcp")
    if version != LATEST or spec.package is None:
        return version
    if spec.source == NPM:
        return resolve_version(spec.package, version)
    return _pypi_latest(spec.package)


def _pip_install(spec: BridgeSpec, version: str) -> Path:
    assert spec.package is not None
    venv = cache_dir() / f"{spec.name}-{version}"
    binary = venv / "bin" / spec.binary
    done = venv / ".mcp-lab-installed"
    if done.exists() and binary.exists():
        return binary
    checked([sys.executable, "-m", "venv", "--clear", str(venv)], f"a virtualenv for {spec.name}")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    checked([*pip, "--quiet", f"{spec.package}=={version}"], f"pip install {spec.package}")
    if not binary.exists():
        raise InstallError(f"pip install {spec.package}=={version} made no {spec.binary}")
    done.write_text(f"{spec.package}=={version}\n")
    return binary


def _install(spec: BridgeSpec, version: str) -> list[str]:
    if spec.source == FASTMCP:
        return fastmcp_program()
    if spec.source == NPM:
        assert spec.package is not None
        return [str(npm_install(spec.name, spec.package, version, spec.binary, cache=cache_dir()))]
    if spec.source == PYPI:
        return [str(_pip_install(spec, version))]
    raise InstallError(f"{spec.name}: a {spec.source} bridge is not installed ({LOCAL}: a test's)")


async def install(spec: BridgeSpec, version: str) -> tuple[str, list[str]]:
    """The version that runs and the program (argv prefix) that starts the bridge."""
    resolved = await asyncio.to_thread(resolve, spec, version)
    return resolved, await asyncio.to_thread(_install, spec, resolved)
