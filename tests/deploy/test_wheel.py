"""The lab as a user installs it: a wheel built from the checkout, installed (not
editable) into a fresh virtualenv with a fresh HOME, lists what the checkout lists
(clients, scenarios, bridges, the clients ``connect`` knows), puts no top-level
``services`` package into the environment, passes ``mcp-lab check`` with the ideal
client, and runs a pytest suite that uses the ``mcp_lab`` fixture, also in a project
that has a ``services`` package of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.lab import ROOT

pytestmark = [pytest.mark.process, pytest.mark.timeout(900)]

EXAMPLES = ROOT / "docs" / "examples"
_INSTALL_SECONDS = 600
_COMMAND_SECONDS = 180


@dataclass(frozen=True)
class Installed:
    """A virtualenv holding the wheel, and the environment its commands run with."""

    bin: Path
    site: Path
    env: dict[str, str]

    def run(self, *argv: str, cwd: Path, timeout: float = _COMMAND_SECONDS) -> str:
        ran = subprocess.run(
            argv, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert ran.returncode == 0, f"{argv} exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
        return ran.stdout


def _user_pip_cache() -> str:
    """The pip cache of the user running the tests: the wheel's dependencies come from
    PyPI, and sharing their downloads keeps a second run quick (installs may be shared;
    nothing of the lab's own is kept there)."""
    ran = subprocess.run(
        [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True, check=False
    )
    return ran.stdout.strip() if ran.returncode == 0 and ran.stdout.strip() else ""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    source, dist, env_dir, home = base / "source", base / "dist", base / "venv", base / "home"
    home.mkdir()
    # Built from a copy, so the checkout gets no build/ or egg-info of it.
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "node_modules", "__pycache__", "*.egg-info", "build", "dist", ".lab"
        ),
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("XDG_", "MCP_", "PYTHON", "VIRTUAL_ENV", "REDIS_URL"))
    }
    env.update(HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1")
    if cache := _user_pip_cache():
        env["PIP_CACHE_DIR"] = cache
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    pip = [python, "-m", "pip"]
    _pip(pip, "wheel", "--quiet", "--no-deps", "-w", str(dist), str(source), cwd=base, env=env)
    (wheel,) = dist.glob("*.whl")
    _pip(pip, "install", "--quiet", str(wheel), "pytest>=8", cwd=base, env=env)
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    yield Installed(env_dir / "bin", site, env)


def _pip(pip: list[str], *argv: str, cwd: Path, env: dict[str, str]) -> None:
    ran = subprocess.run(
        [*pip, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=_INSTALL_SECONDS
    )
    assert ran.returncode == 0, f"pip {argv[0]} failed:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"


def _checkout(*argv: str) -> str:
    ran = subprocess.run(
        [sys.executable, "-m", "mcp_lab", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=_COMMAND_SECONDS,
        check=True,
    )
    return ran.stdout


def test_the_wheel_installs_mcp_lab_and_no_services_package(installed: Installed) -> None:
    assert (installed.site / "mcp_lab" / "__init__.py").is_file()
    strays = [p.name for p in installed.site.iterdir() if p.name.startswith("services")]
    assert strays == [], f"the wheel installed {strays} at the top level"
    # editable installs leave a .pth or finder; a wheel install leaves none of ours
    assert not list(installed.site.glob("__editable__*mcp_subscribe_lab*"))


@pytest.mark.parametrize(
    "argv",
    [
        ("clients", "list", "--format", "json"),
        ("scenarios",),
        ("bridges", "list"),
        ("connect", "--help"),  # its clients: the client files with a [connect] table
    ],
    ids=["clients-list", "scenarios", "bridges-list", "connect-help"],
)
def test_the_installed_lab_lists_what_the_checkout_lists(
    installed: Installed, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    mine = installed.run(str(installed.bin / "mcp-lab"), *argv, cwd=tmp_path)
    theirs = _checkout(*argv)
    if argv[-1] == "json":
        names = sorted(entry["name"] for entry in json.loads(mine))
        expected = sorted(entry["name"] for entry in json.loads(theirs))
        assert names == expected, f"missing from the wheel: {sorted(set(expected) - set(names))}"
        assert len(names) >= 30
    assert mine == theirs


def test_mcp_lab_check_passes_the_ideal_client_from_the_install(
    installed: Installed, tmp_path: Path
) -> None:
    client = tmp_path / "ideal_client.py"
    shutil.copy(EXAMPLES / "ideal_client.py", client)
    out = installed.run(
        str(installed.bin / "mcp-lab"),
        "check",
        "--command",
        f"{installed.bin / 'python'} {client} {{url}}",
        cwd=tmp_path,
    )
    assert "PASS" in out and "level 6" in out, out


@pytest.mark.parametrize("own_services", [False, True], ids=["plain", "own-services-package"])
def test_a_pytest_suite_with_the_fixture_passes_from_the_install(
    installed: Installed, tmp_path: Path, own_services: bool
) -> None:
    """The fixture of the installed plugin, in a project of the user's own; with
    ``own_services`` that project has a top-level ``services`` package, which the lab's
    import name once clashed with."""
    for name in ("ideal_client.py", "test_own_client.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    if own_services:
        (tmp_path / "services").mkdir()
        (tmp_path / "services" / "__init__.py").write_text("")
        (tmp_path / "services" / "api.py").write_text("ANSWER = 42\n")
        (tmp_path / "test_services.py").write_text(
            "from services.api import ANSWER\n\n\ndef test_own_package() -> None:\n"
            "    assert ANSWER == 42\n"
        )
    for argv in ([str(installed.bin / "pytest")], [str(installed.bin / "python"), "-m", "pytest"]):
        out = installed.run(*argv, "-q", "-p", "no:cacheprovider", cwd=tmp_path, timeout=300)
        expected = 4 if own_services else 3
        assert f"{expected} passed" in out, out
