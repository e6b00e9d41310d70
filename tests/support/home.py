"""The test run's own HOME: what the suite (and every process a test starts) writes goes
to the run's temporary folder, never to the user's HOME, caches or history.

tests/conftest.py points ``HOME``, the XDG directories (``up``'s runtime file, the
embedded Redis's data, every program's config, data, state and cache),
``MCP_LAB_RUNS`` (the runners' run folders) and ``MCP_LAB_HISTORY`` (their history)
into one temporary folder per pytest process, for the whole run. What stays the
user's is what is installed and only read or added to: the clients' and bridges'
installs (30 clients: an install is minutes) and where a Python or a registry is found
(pyenv's and uv's Pythons, the npm and pip configurations naming a mirror, Docker's
client configuration). Each is carried over only when the user has it and has not set
it already.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The XDG base directories, and where each is under a HOME.
XDG = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache",
}
RUNS = "runs"  # the run folders of both runners, under the run's own folder
HISTORY = "history.sqlite3"
# The environment as the user started the tests (read before tests/conftest.py moves HOME).
USER_ENVIRON: dict[str, str] = dict(os.environ)


def _xdg(environ: Mapping[str, str], name: str, home: Path) -> Path:
    value = environ.get(name, "")
    return Path(value) if os.path.isabs(value) else home / XDG[name]


def shared(environ: Mapping[str, str]) -> dict[str, str]:
    """The user's installs and lookups the tests keep using (see the module docstring),
    as settings for an environment whose HOME and XDG directories are elsewhere."""
    home = Path(environ.get("HOME") or Path.home())
    config = _xdg(environ, "XDG_CONFIG_HOME", home)
    data = _xdg(environ, "XDG_DATA_HOME", home)
    wanted: dict[str, Path | None] = {
        # The installs: where the runners' cache_dir() puts them by default (made there
        # on first use: the next run reuses them).
        "MCP_LAB_CLIENTS_CACHE": home / ".cache" / "mcp-lab" / "clients",
        "MCP_LAB_BRIDGES_CACHE": home / ".cache" / "mcp-lab" / "bridges",
        # Pythons another Python's client may need (mcp_lab.runners.install.find_python).
        "PYENV_ROOT": _existing(home / ".pyenv"),
        "UV_PYTHON_INSTALL_DIR": _existing(data / "uv" / "python"),
        # Registries: a mirror, a token, an offline index.
        "NPM_CONFIG_USERCONFIG": _existing(home / ".npmrc"),
        "PIP_CONFIG_FILE": _existing(config / "pip" / "pip.conf", home / ".pip" / "pip.conf"),
        "DOCKER_CONFIG": _existing(home / ".docker"),
    }
    return {
        name: str(path)
        for name, path in wanted.items()
        if path is not None and not environ.get(name)
    }


def _existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.exists()), None)


def own(root: Path) -> dict[str, str]:
    """HOME, the XDG directories, the run folders and the history, all under ``root``."""
    home = root / "home"
    settings = {"HOME": str(home)}
    for name, under in XDG.items():
        settings[name] = str(home / under)
    settings["MCP_LAB_RUNS"] = str(root / RUNS)
    settings["MCP_LAB_HISTORY"] = str(root / HISTORY)
    for folder in (home, *(home / under for under in XDG.values())):
        folder.mkdir(parents=True, exist_ok=True)
    return settings
