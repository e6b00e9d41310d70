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
    load_client,
    parse,
)
from mcp_lab.runners.clients.pins import CLIENTS, clients_with_files

MINIMAL = """
name = "mine"
kind = "program"
[install]
command = "python3"
[run]
argv = ["{binary}", "client.py", "{url}"]
"""


def test_every_built_in_client_is_a_file_of_its_own() -> None:
    files = [*definition.CLIENT_DEFS.glob("*.toml"), *definition.LIBRARIES.glob("*.toml")]
    assert sorted(p.stem for p in files) == sorted(definition.every_file())
    # the editors are files for mcp-lab connect only: not run, not listed by clients
    editors = {n for n, c in definition.every_file().items() if c.kind == definition.EDITOR}
    assert editors == {"vscode", "cursor"}
    assert sorted(CLIENTS) == sorted(set(definition.every_file()) - editors)
    assert all(definition.every_file()[n].not_installable for n in editors)
    assert all(c.kind in ("cli", "inspector") for c in definition.builtin().values()
               if Path(c.origin).parent == definition.CLIENT_DEFS)  # fmt: skip
    assert all(c.kind == "library" for c in CLIENTS.values()
               if Path(c.origin).parent == definition.LIBRARIES)  # fmt: skip
    clis = [c for c in CLIENTS.values() if c.kind == "cli" and not c.not_installable]
    assert len(clis) >= 8
    assert {"claude-code", "codex", "copilot", "gemini-cli", "opencode"} <= {c.name for c in clis}
    assert all(HTTP in c.transports or STDIO in c.transports for c in clis)
    assert CLIENTS["claude-code"].interactive == "claude-code"
    assert CLIENTS["copilot"].needs_node22 and CLIENTS["inspector"].needs_node22


def test_a_file_of_ones_own_is_read_and_cannot_take_a_built_ins_name(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(MINIMAL)
    client = load_client(mine)
    assert (client.name, client.kind, client.source, client.version) == (
        "mine", "program", "command", "local"
    )  # fmt: skip
    assert (client.client_info, client.transports, client.model_api) == ("mine", ("http",), "none")
    assert client.here == str(tmp_path)
    assert clients_with_files([mine])["mine"] == client
    # A file named as a built-in would have its rows (history, export) credited to the
    # built-in: refused, saying what to do. The built-in's own file is still fine.
    own = tmp_path / "codex.toml"
    own.write_text(MINIMAL.replace('"mine"', '"codex"'))
    with pytest.raises(DefinitionError, match=r"name 'codex' is a built-in's .*a name of its own"):
        clients_with_files([own])
    assert CLIENTS["codex"].kind == "cli"  # the built-in itself is untouched
    assert clients_with_files([Path(CLIENTS["codex"].origin)])["codex"] == CLIENTS["codex"]


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
        load_client(bad)
    assert str(raised.value).startswith(f"{bad}: ") and says in str(raised.value)


def test_a_file_that_is_not_toml_or_not_there_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text("name = [")
    with pytest.raises(DefinitionError, match="not valid TOML"):
        load_client(tmp_path / "x.toml")
    with pytest.raises(DefinitionError, match="cannot be read"):
        load_client(tmp_path / "missing.toml")


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
    assert load_client(path).python == "3.13"
    path.write_text(PYPI_CLIENT.format(python=""))
    assert load_client(path).python is None
    for wrong in ('python = "3"', 'python = "3.13.0"', "python = 3.13"):
        path.write_text(PYPI_CLIENT.format(python=wrong))
        with pytest.raises(DefinitionError, match=r"py-agent\.toml: \[install\] python is a"):
            load_client(path)
    npm = PYPI_CLIENT.format(python='python = "3.13"').replace('pypi = "py-agent"', 'npm = "x"')
    path.write_text(npm)
    with pytest.raises(DefinitionError, match=r"for a pypi package"):
        load_client(path)


def test_a_client_file_pins_what_its_install_needs(tmp_path: Path) -> None:
    base = ('name = "py-agent"\nkind = "program"\n[run]\nargv = ["{binary}"]\n'
            '[install]\nversion = "1.0"\n')  # fmt: skip
    path = tmp_path / "py-agent.toml"
    path.write_text(base + 'pypi = "py-agent"\nconstraints = ["mcp<2.3"]\n'
                    'packages = ["mcp==2.2.1", "httpx"]\n')  # fmt: skip
    spec = load_client(path)
    assert (spec.constraints, spec.packages) == (("mcp<2.3",), ("mcp==2.2.1", "httpx"))
    path.write_text(base + 'npm = "my-agent"\npackages = ["zod@3.25.0"]\n')
    assert load_client(path).packages == ("zod@3.25.0",)
    for wrong, message in (
        ('npm = "my-agent"\nconstraints = ["zod@3"]\n', "constraints are pip's"),
        ('pypi = "py-agent"\nconstraints = "mcp<2.3"\n', "constraints must be a list"),
        ('pypi = "py-agent"\npackages = ["--index-url=http://x"]\n', "is no requirement"),
        ('command = "python3"\npackages = ["httpx"]\n', "for an npm or pypi package"),
    ):
        path.write_text(base + wrong)
        with pytest.raises(DefinitionError, match=message):
            load_client(path)
    assert CLIENTS["kilo"].constraints == () and CLIENTS["kilo"].packages == ()
