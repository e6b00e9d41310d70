"""mcp_lab.runners.install: what the runners install from the registries."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mcp_lab.runners.install import (
    InstallError,
    find_python,
    npm_install,
    pypi_latest,
    python_version,
)
from tests.support.ci import IN_CI


def test_the_newest_version_of_a_package_with_extras_is_that_of_its_name() -> None:
    assert pypi_latest("pydantic-ai-slim[mcp]") == pypi_latest("pydantic-ai-slim")


def test_a_package_that_links_no_program_is_found_by_its_path_under_node_modules(
    tmp_path: Path,
) -> None:
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    found = npm_install("is-number", "is-number", "7.0.0", "is-number/index.js", cache=tmp_path)
    assert found == tmp_path / "is-number-7.0.0" / "node_modules" / "is-number" / "index.js"
    assert found.is_file()


# find_python: each candidate a real program (a shell script saying its version, or a
# pyenv shim that runs nothing), in a temp tree laid out as PATH, pyenv and uv lay it.
def _program(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _python(path: Path, says: str = "3.99") -> Path:
    """An interpreter that answers find_python's version question with ``says``."""
    return _program(path, f"echo {says}")


def _shim(path: Path) -> Path:
    """pyenv's shim of a version not selected: it runs nothing."""
    return _program(path, f"echo 'pyenv: {path.name}: command not found' >&2\nexit 127")


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME an empty folder, no PYENV_ROOT, no uv dirs of the caller's, and a PATH of
    one empty folder (no pyenv, no uv, no apt-cache, no python3.99): each test adds the
    programs it needs there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "home").mkdir()
    (tmp_path / "bin").mkdir()
    return tmp_path


def test_none_found_says_where_it_looked_what_it_tried_and_how_to_get_one(bare: Path) -> None:
    shim = _shim(bare / "bin" / "python3.99")
    older = _python(bare / "home" / ".pyenv" / "versions" / "3.99.1" / "bin" / "python3.99",
                    says="3.98")  # fmt: skip
    with pytest.raises(InstallError) as refused:
        find_python("3.99")
    said = str(refused.value)
    assert said.startswith("Python 3.99 is needed and none was found (looked at python3.99 on")
    assert str(bare / "home" / ".pyenv" / "versions") in said
    assert str(bare / "home" / ".local" / "share" / "uv" / "python") in said
    assert f"{shim} (does not run)" in said and f"{older} (is 3.98)" in said
    # no pyenv, no uv on PATH, no python3.99 package: how to get either
    assert "Get one with `uv python install 3.99` (uv: " in said
    assert "`pyenv install 3.99` (pyenv: " in said
    assert "apt-get" not in said


def test_pyenv_and_uv_on_path_are_the_ways_offered(bare: Path) -> None:
    _program(bare / "bin" / "pyenv", "exit 1")  # knows no 3.99
    _program(bare / "bin" / "uv", "exit 2")
    with pytest.raises(InstallError) as refused:
        find_python("3.99")
    said = str(refused.value)
    assert "`pyenv prefix`" in said and "`uv python find`" in said
    assert said.endswith("Get one with `pyenv install 3.99` or `uv python install 3.99`, "
                         "then run again")  # fmt: skip


def test_the_systems_package_is_offered_where_its_index_has_one(bare: Path) -> None:
    """apt-cache policy names a candidate: apt-get install first."""
    _program(bare / "bin" / "apt-cache", 'echo "python3.99:"; echo "  Candidate: 3.99.1-1"')
    _program(bare / "bin" / "uv", "exit 2")
    with pytest.raises(InstallError, match=r"Get one with `apt-get install python3\.99` or `uv "):
        find_python("3.99")
    _program(bare / "bin" / "apt-cache", 'echo "python3.99:"; echo "  Candidate: (none)"')
    with pytest.raises(InstallError) as refused:
        find_python("3.99")
    assert "apt-get" not in str(refused.value)


def test_pyenv_root_is_looked_at_where_home_has_no_pyenv(
    bare: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh HOME (a CI runner): pyenv lives where PYENV_ROOT says; the newest there
    first, then ~/.pyenv's; a shim on PATH that runs nothing is passed over."""
    _shim(bare / "bin" / "python3.99")
    root = bare / "pyenv"
    _python(root / "versions" / "3.99.2" / "bin" / "python3.99")
    newest = _python(root / "versions" / "3.99.10" / "bin" / "python3.99")
    _python(bare / "home" / ".pyenv" / "versions" / "3.99.11" / "bin" / "python3.99")
    monkeypatch.setenv("PYENV_ROOT", str(root))
    assert find_python("3.99") == str(newest)


def test_home_pyenv_is_looked_at_when_pyenv_root_is_unset(bare: Path) -> None:
    found = _python(bare / "home" / ".pyenv" / "versions" / "3.99.0" / "bin" / "python3.99")
    assert find_python("3.99") == str(found)


def test_pyenv_prefix_names_one_elsewhere(bare: Path) -> None:
    """pyenv on PATH, its versions in neither PYENV_ROOT nor ~/.pyenv (a system pyenv)."""
    prefix = bare / "opt" / "pythons" / "3.99.4"
    found = _python(prefix / "bin" / "python3.99")
    _program(bare / "bin" / "pyenv", f'[ "$1 $2" = "prefix 3.99" ] && echo {prefix}')
    assert find_python("3.99") == str(found)


def test_uv_managed_pythons_are_found(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's own folder (XDG data, or UV_PYTHON_INSTALL_DIR), then `uv python find`."""
    managed = bare / "home" / ".local" / "share" / "uv" / "python"
    older = _python(managed / "cpython-3.99.1-linux-x86_64-gnu" / "bin" / "python3.99")
    newer = _python(managed / "cpython-3.99.3-linux-x86_64-gnu" / "bin" / "python3.99")
    assert find_python("3.99") == str(newer)
    monkeypatch.setenv("UV_PYTHON_INSTALL_DIR", str(bare / "elsewhere"))
    with pytest.raises(InstallError):
        find_python("3.99")
    _program(bare / "bin" / "uv", f'[ "$1 $2 $3" = "python find 3.99" ] && echo {older}')
    assert find_python("3.99") == str(older)


def test_a_python_on_path_counts_only_when_it_says_it_is_that_version(bare: Path) -> None:
    liar = _python(bare / "bin" / "python3.99", says="3.11")
    installed = _python(bare / "home" / ".pyenv" / "versions" / "3.99.0" / "bin" / "python3.99")
    assert find_python("3.99") == str(installed)
    _python(liar)
    assert find_python("3.99") == str(liar)  # on PATH and 3.99: first


def test_the_real_pyenv_is_found_with_home_an_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's own pyenv (PYENV_ROOT, its shims on PATH) with HOME empty, as a
    fresh HOME runs it: a Python 3.13 that really runs."""
    root = os.environ.get("PYENV_ROOT")
    if not root or not list(Path(root, "versions").glob("3.13.*/bin/python3.13")):
        if IN_CI and shutil.which("pyenv"):
            pytest.fail("CI=true, pyenv on PATH, and PYENV_ROOT names no Python 3.13")
        pytest.skip("no pyenv with a Python 3.13 here (PYENV_ROOT)")
    monkeypatch.setenv("HOME", str(tmp_path))
    found = find_python("3.13")
    ran = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
    assert ran.stdout.startswith("Python 3.13"), (found, ran.stdout, ran.stderr)
    assert python_version(found) == "3.13"


def test_a_pypi_install_takes_the_files_constraints_and_packages_and_redoes_itself(
    tmp_path: Path,
) -> None:
    """A client file's ``constraints`` pin what a dependency may be, its ``packages``
    come beside the client; the cached install is made again when they change, or when
    asked (``--reinstall``), and only then."""
    from mcp_lab.runners.install import pypi_install

    def version_of(venv: Path, name: str) -> str:
        ask = f"import importlib.metadata as m; print(m.version({name!r}))"
        found = subprocess.run([str(venv / "bin" / "python"), "-c", ask], capture_output=True,
                               text=True, check=False)  # fmt: skip
        return found.stdout.strip() or found.stderr.strip().splitlines()[-1]

    venv = tmp_path / "dateutil-2.9.0.post0"
    found = pypi_install("dateutil", "python-dateutil", "2.9.0.post0", "python", cache=tmp_path,
                         constraints=("six==1.16.0",))  # fmt: skip
    assert found == venv / "bin" / "python"
    assert version_of(venv, "six") == "1.16.0"  # not the newest six: the constraint held
    mark = venv / "kept-by-the-cache"
    mark.write_text("")
    pypi_install("dateutil", "python-dateutil", "2.9.0.post0", "python", cache=tmp_path,
                 constraints=("six==1.16.0",))  # fmt: skip
    assert mark.exists()  # the same install: cached
    pypi_install("dateutil", "python-dateutil", "2.9.0.post0", "python", cache=tmp_path,
                 constraints=("six==1.16.0",), packages=("idna==3.7",))  # fmt: skip
    assert not mark.exists() and version_of(venv, "idna") == "3.7"  # changed: made again
    mark.write_text("")
    pypi_install("dateutil", "python-dateutil", "2.9.0.post0", "python", cache=tmp_path,
                 constraints=("six==1.16.0",), packages=("idna==3.7",), reinstall=True)  # fmt: skip
    assert not mark.exists() and version_of(venv, "six") == "1.16.0"


def test_an_npm_package_whose_platform_package_is_missing_has_no_binary(tmp_path: Path) -> None:
    """Kilo Code 7.6.2 names platform packages that are not on the registry: npm skips
    them and links the launcher alone, which finds no binary. The install says so."""
    import platform
    import sys

    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    if (sys.platform, platform.machine()) != ("linux", "x86_64"):
        pytest.skip("the missing platform package is Kilo's linux-x64 one")
    with pytest.raises(InstallError) as failed:
        npm_install("kilo", "@kilocode/cli", "7.6.2", "kilo", cache=tmp_path)
    said = str(failed.value)
    assert said.startswith("@kilocode/cli@7.6.2 has no binary for linux-x64: its launcher "
                           "needs a platform package and npm installed none"), said  # fmt: skip
    assert "@kilocode/cli-linux-x64@7.6.2 is not on the npm registry" in said
    assert not (tmp_path / "kilo-7.6.2" / ".mcp-lab-installed").exists()  # never cached


def test_npm_packages_beside_the_client_and_a_reinstall(tmp_path: Path) -> None:
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    binary = "is-number/index.js"
    npm_install("is-number", "is-number", "7.0.0", binary, cache=tmp_path)
    prefix = tmp_path / "is-number-7.0.0"
    assert not (prefix / "node_modules" / "is-odd").exists()
    npm_install("is-number", "is-number", "7.0.0", binary, cache=tmp_path,
                packages=("is-odd@3.0.1",))  # fmt: skip
    assert (prefix / "node_modules" / "is-odd" / "package.json").is_file()
    mark = prefix / "kept-by-the-cache"
    mark.write_text("")
    npm_install("is-number", "is-number", "7.0.0", binary, cache=tmp_path,
                packages=("is-odd@3.0.1",))  # fmt: skip
    assert mark.exists()
    npm_install("is-number", "is-number", "7.0.0", binary, cache=tmp_path,
                packages=("is-odd@3.0.1",), reinstall=True)  # fmt: skip
    assert not mark.exists() and (prefix / "node_modules" / "is-odd").is_dir()


def test_a_package_without_the_program_its_file_names_is_an_install_failure_naming_its_own(
    tmp_path: Path,
) -> None:
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    with pytest.raises(InstallError) as failed:
        npm_install("is-number", "is-number", "7.0.0", "isnum", cache=tmp_path)
    assert str(failed.value) == (
        "npm install is-number@7.0.0 made no isnum: the package has no binary isnum "
        "(it links no program)"
    )
