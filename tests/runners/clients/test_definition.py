"""A client as data: the built-in client files, and what a file of one's own may say."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_lab.runners.clients import definition
from mcp_lab.runners.clients.definition import (
    HTTP,
    STDIO,
    DefinitionError,
    from_command,
    load,
    parse,
)
from mcp_lab.runners.clients.pins import CLIENTS, with_files

MINIMAL = """
name = "mine"
kind = "program"
[install]
command = "python3"
[run]
argv = ["{binary}", "client.py", "{url}"]
"""


def test_every_built_in_client_is_a_file_of_its_own() -> None:
    files = [*definition.DEFS.glob("*.toml"), *definition.LIBRARIES.glob("*.toml")]
    assert sorted(p.stem for p in files) == sorted(CLIENTS)
    assert all(c.kind in ("cli", "inspector") for c in definition.builtin().values()
               if Path(c.origin).parent == definition.DEFS)  # fmt: skip
    assert all(c.kind == "library" for c in CLIENTS.values()
               if Path(c.origin).parent == definition.LIBRARIES)  # fmt: skip
    clis = [c for c in CLIENTS.values() if c.kind == "cli" and not c.not_installable]
    assert len(clis) >= 8
    assert {"claude-code", "codex", "copilot", "gemini-cli", "opencode"} <= {c.name for c in clis}
    assert all(HTTP in c.transports or STDIO in c.transports for c in clis)
    assert CLIENTS["claude-code"].interactive == "claude-code"
    assert CLIENTS["copilot"].needs_node22 and CLIENTS["inspector"].needs_node22


def test_a_file_of_ones_own_is_read_and_replaces_a_built_in_of_its_name(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(MINIMAL)
    client = load(mine)
    assert (client.name, client.kind, client.source, client.version) == (
        "mine", "program", "command", "local"
    )  # fmt: skip
    assert (client.client_info, client.transports, client.model_api) == ("mine", ("http",), "none")
    assert client.here == str(tmp_path)
    own = tmp_path / "codex.toml"
    own.write_text(MINIMAL.replace('"mine"', '"codex"'))
    assert with_files([own])["codex"].kind == "program"
    assert CLIENTS["codex"].kind == "cli"  # the built-in itself is untouched


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (('kind = "program"', 'kind = "robot"'), "kind 'robot' is not one of"),
        (('command = "python3"', 'npm = "x"'), "[install] version is needed for a npm package"),
        (('name = "mine"', 'name = "mine"\ncolour = 1'), "unknown key 'colour' in the top level"),
        (('"{url}"', '"{uri}"'), "unknown placeholder {uri}"),
        (('"{url}"', '"{url"'), "write {{ and }} for a literal brace"),
        (('kind = "program"', 'kind = "cli"'), "kind 'cli' needs [model] api"),
        (('argv = ["{binary}", "client.py", "{url}"]', ""), "[run] argv is needed"),
        (("[install]", '[config]\nwriter = "mcp-servers-json"\n[install]'), "[config] path"),
    ],
)
def test_a_file_that_cannot_be_used_says_where_and_why(
    tmp_path: Path, change: tuple[str, str], says: str
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL.replace(*change))
    with pytest.raises(DefinitionError) as raised:
        load(bad)
    assert str(raised.value).startswith(f"{bad}: ") and says in str(raised.value)


def test_a_file_that_is_not_toml_or_not_there_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text("name = [")
    with pytest.raises(DefinitionError, match="not valid TOML"):
        load(tmp_path / "x.toml")
    with pytest.raises(DefinitionError, match="cannot be read"):
        load(tmp_path / "missing.toml")


def test_a_command_line_is_a_client_with_no_model_that_any_name_may_be() -> None:
    client = from_command("node my client.js {url}")
    assert client.argv == ("node", "my", "client.js", "{url}")
    assert (client.kind, client.client_info, client.package) == ("program", "*", "node")
    with pytest.raises(DefinitionError, match="--command is empty"):
        from_command("  ")
    with pytest.raises(DefinitionError, match="--command"):
        from_command("node 'unclosed")
    assert parse({"name": "x", "kind": "program", "install": {"command": "x"},
                  "run": {"argv": ["x"]}}, "here").origin == "here"  # fmt: skip


PYPI_CLIENT = """
name = "py-agent"
kind = "cli"
[install]
pypi = "py-agent"
version = "1.0.0"
{python}
[model]
api = "openai-chat"
[run]
argv = ["{{binary}}", "-p", "{{prompt}}"]
"""


def test_a_pypi_client_names_the_python_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "py-agent.toml"
    path.write_text(PYPI_CLIENT.format(python='python = "3.13"'))
    assert load(path).python == "3.13"
    path.write_text(PYPI_CLIENT.format(python=""))
    assert load(path).python is None
    for wrong in ('python = "3"', 'python = "3.13.0"', "python = 3.13"):
        path.write_text(PYPI_CLIENT.format(python=wrong))
        with pytest.raises(DefinitionError, match=r"py-agent\.toml: \[install\] python is a"):
            load(path)
    npm = PYPI_CLIENT.format(python='python = "3.13"').replace('pypi = "py-agent"', 'npm = "x"')
    path.write_text(npm)
    with pytest.raises(DefinitionError, match=r"for a pypi package"):
        load(path)


def _interpreter(path: Path, exit_code: int) -> Path:
    """A program at ``path`` that answers find_python's version check with ``exit_code``
    (0: it is the version asked for; 1: another version; 127: a pyenv shim that runs
    nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(0o755)
    return path


def test_the_python_a_client_needs_is_one_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """python3.N on PATH when it runs as 3.N (a pyenv shim may not), else
    $PYENV_ROOT/versions, else ~/.pyenv/versions; none: how to get one."""
    import os

    from mcp_lab.runners.install import InstallError, find_python

    shim = _interpreter(tmp_path / "shims" / "python3.99", 127)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(InstallError, match=r"python3\.99 is needed: none on PATH") as refused:
        find_python("3.99")
    assert "pyenv install 3.99" in str(refused.value)
    assert "uv python install 3.99" in str(refused.value)
    assert str(shim) in str(refused.value)
    # HOME holds no pyenv, PYENV_ROOT names one elsewhere (a fresh HOME, a CI runner)
    elsewhere = tmp_path / "pyenv"
    real = _interpreter(elsewhere / "versions" / "3.99.1" / "bin" / "python3.99", 0)
    monkeypatch.setenv("PYENV_ROOT", str(elsewhere))
    assert find_python("3.99") == str(real)
    # one under ~/.pyenv too, older: PYENV_ROOT's comes first
    _interpreter(tmp_path / "home" / ".pyenv" / "versions" / "3.99.0" / "bin" / "python3.99", 0)
    assert find_python("3.99") == str(real)
    # on PATH and really 3.99: taken first
    monkeypatch.setenv("PATH", f"{real.parent}{os.pathsep}{os.environ['PATH']}")
    assert find_python("3.99") == str(real)


def test_a_python_on_path_of_another_version_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from mcp_lab.runners.install import InstallError, find_python

    liar = _interpreter(tmp_path / "bin" / "python3.99", 1)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    monkeypatch.setenv("PATH", f"{liar.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(InstallError, match=r"none runs as 3\.99"):
        find_python("3.99")


def test_the_real_pyenv_is_found_with_home_an_empty_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's own pyenv (PYENV_ROOT) with HOME empty, as a fresh HOME runs it."""
    import os
    import subprocess

    from mcp_lab.runners.install import find_python

    root = os.environ.get("PYENV_ROOT")
    versions = sorted(Path(root, "versions").glob("3.13.*")) if root else []
    if not versions:
        if os.environ.get("CI") == "true" and Path("/root/.pyenv/versions").is_dir():
            pytest.fail("CI has a pyenv but PYENV_ROOT names no 3.13")
        pytest.skip("no pyenv with a Python 3.13 on this machine")
    monkeypatch.setenv("HOME", str(tmp_path))
    found = find_python("3.13")
    ran = subprocess.run([found, "--version"], capture_output=True, text=True, check=True)
    assert ran.stdout.startswith("Python 3.13"), (found, ran.stdout)
