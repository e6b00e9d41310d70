"""``mcp-lab connect`` in process: what it prints, made from the client files'
``[connect]`` tables; the outputs for the nine clients it first knew, pinned byte for
byte (connect_pinned.json, captured before the tables existed); what a ``[connect]``
table may say; and what it tells beside the snippet. Gemini CLI (0.61.0, the pinned
one) connects to no MCP server in a folder it does not trust (the lab shows as
Disabled): ``connect gemini-cli`` says whether the folder is trusted, and how to trust
it, from the same files Gemini CLI reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_lab.cli import connect
from mcp_lab.runners.clients import connecting
from mcp_lab.runners.clients.connecting import Here
from mcp_lab.runners.clients.definition import DefinitionError, parse

URL = "http://127.0.0.1:18089/mcp"
# The outputs of `mcp-lab connect C [--json]` (stdout) for the lab at 8089, run in
# /tmp/before with no ~/.gemini: as the hand-written entries made them.
PINNED = json.loads((Path(__file__).with_name("connect_pinned.json")).read_text())


def trust_file(home: Path, rules: dict[str, str]) -> None:
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps(rules))


def said(folder: Path, home: Path, **env: str) -> str:
    return " ".join(connecting.gemini_trust(folder, home, env))


def test_an_untrusted_folder_is_named_with_the_ways_to_trust_it(tmp_path: Path) -> None:
    folder, home = tmp_path / "work", tmp_path / "home"
    folder.mkdir()
    text = said(folder, home)
    assert "only in a folder it trusts" in text and "shows the lab as Disabled" in text
    assert f"This folder ({folder.resolve()}) is not trusted yet" in text
    assert "'Trust folder'" in text
    assert json.dumps({str(folder.resolve()): "TRUST_FOLDER"}, separators=(",", ":")) in text
    assert "~/.gemini/trustedFolders.json" in text
    assert "--skip-trust" in text and "GEMINI_CLI_TRUST_WORKSPACE=true" in text


@pytest.mark.parametrize(
    ("rule", "level", "trusted"),
    [
        ("work", "TRUST_FOLDER", True),
        ("work/sub", "TRUST_PARENT", True),  # the parent of the path named: work
        (".", "TRUST_FOLDER", True),  # a folder above
        ("work/sub", "TRUST_FOLDER", False),  # a folder below does not count
        ("elsewhere", "TRUST_FOLDER", False),
    ],
)
def test_the_rules_of_the_trust_file_as_gemini_reads_them(
    tmp_path: Path, rule: str, level: str, trusted: bool
) -> None:
    folder, home = tmp_path / "work", tmp_path / "home"
    (folder / "sub").mkdir(parents=True)
    trust_file(home, {str((tmp_path / rule).resolve()): level})
    text = said(folder, home)
    assert ("is trusted" in text) is trusted, text
    assert ("not trusted yet" in text) is not trusted, text


def test_the_longest_rule_decides_and_do_not_trust_is_said(tmp_path: Path) -> None:
    folder, home = tmp_path / "work", tmp_path / "home"
    folder.mkdir()
    trust_file(home, {str(tmp_path): "TRUST_FOLDER", str(folder): "DO_NOT_TRUST"})
    text = said(folder, home)
    assert "is marked DO_NOT_TRUST in ~/.gemini/trustedFolders.json" in text


def test_trust_turned_off_or_given_by_the_environment(tmp_path: Path) -> None:
    folder, home = tmp_path / "work", tmp_path / "home"
    folder.mkdir()
    assert "shell trusts its folder" in said(folder, home, GEMINI_CLI_TRUST_WORKSPACE="true")
    elsewhere = tmp_path / "trust.json"
    elsewhere.write_text(json.dumps({str(folder): "TRUST_FOLDER"}))
    assert f"has {str(folder)!r}: TRUST_FOLDER" in said(
        folder, home, GEMINI_CLI_TRUSTED_FOLDERS_PATH=str(elsewhere)
    )
    (home / ".gemini").mkdir(parents=True)
    settings = {"security": {"folderTrust": {"enabled": False}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    assert "Folder trust is off" in said(folder, home)


def test_connect_gemini_cli_prints_the_trust_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE", raising=False)
    monkeypatch.delenv("GEMINI_CLI_TRUSTED_FOLDERS_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    assert connect.main("gemini-cli", URL, as_json=False) == 0
    text = capsys.readouterr().out
    comments = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert "shows the lab as Disabled" in comments
    assert f"This folder ({tmp_path.resolve()}) is not trusted yet" in comments
    assert connect.main("gemini-cli", URL, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert any("not trusted yet" in note for note in data["notes"])
    assert connect.main("claude-code", URL, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("client", sorted(PINNED))
def test_the_first_nine_say_what_they_said_before_the_client_files_did(
    client: str, as_json: bool, tmp_path: Path
) -> None:
    assert len(PINNED) == 9
    here = Here(Path("/tmp/before"), tmp_path / "home", {})  # the folder need not exist
    printed = connect.render(connect.CLIENTS[client], "http://127.0.0.1:8089/mcp", as_json, here)
    assert printed + "\n" == PINNED[client]["json" if as_json else "text"]


MINE = {
    "name": "mine",
    "kind": "editor",
    "install": {"unavailable": "an editor"},
    "connect": {
        "file": "~/.mine/mcp.json",
        "language": "json",
        "template": {"servers": {"{server}": {"url": "{url}", "env": {"A": "{{b}}"}}}},
        "start": "mine .",
        "notes": ["then open {url}"],
    },
}


def test_a_file_of_ones_own_is_connectable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(
        'name = "mine"\nkind = "editor"\n[install]\nunavailable = "an editor"\n'
        '[connect]\nfile = "~/.mine.yaml"\nlanguage = "yaml"\nstart = "mine"\n'
        'template = """\nservers:\n  {server}: {{url: {url}}}\n"""\n'
    )
    assert connect.main(connect.from_file(mine), URL, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"] == ["servers:", f"  lab: {{url: {URL}}}"] and data["notes"] == []
    made = parse(MINE, "mine.toml").connect
    assert made is not None
    shown = made.connection("Mine", URL, Here(tmp_path, tmp_path, {}))
    assert shown.config == {"servers": {"lab": {"url": URL, "env": {"A": "{b}"}}}}
    assert (shown.file, shown.start, shown.notes) == ("~/.mine/mcp.json", "mine .",
                                                      [f"then open {URL}"])  # fmt: skip
    plain = tmp_path / "plain.toml"
    plain.write_text('name = "plain"\nkind = "program"\n[install]\ncommand = "x"\n'
                     '[run]\nargv = ["x"]\n')  # fmt: skip
    with pytest.raises(DefinitionError, match=r"plain.toml: no \[connect\] table"):
        connect.from_file(plain)


def _with(**connect_table: object) -> dict[str, object]:
    table = {k: v for k, v in {**MINE["connect"], **connect_table}.items() if v is not None}
    return {**MINE, "connect": table}


CODEX_AS_JSON = {**_with(template=None, writer="codex"), "config": {"writer": "codex"}}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (_with(file=""), r"\[connect\] file must be a non-empty string"),
        (_with(language="ini"), r"\[connect\] language 'ini' is not one of json, toml, yaml"),
        (_with(writer="claude-code"), r"exactly one of writer .* and template"),
        (_with(template=None), r"exactly one of writer .* and template"),
        (_with(template="{url}"), r"template must be a table .* for language json"),
        (_with(language="yaml", template={"a": 1}), r"template must be a non-empty string"),
        (_with(template={"x": "{port}"}), r"template.x: unknown placeholder \{port\}"),
        (_with(start="run {"), r"\[connect\] start: Single '\{' .* literal brace"),
        (_with(notes="one"), r"\[connect\] notes must be a list"),
        (_with(notes_from="moon"), r"notes_from 'moon' is not one of gemini_folder_trust"),
        (_with(colour="red"), r"unknown key 'colour' in \[connect\]"),
        ({**MINE, "connect": "yes"}, r"\[connect\] must be a table"),
        (_with(template=None, writer="env"), r"writer 'env' makes no snippet"),
        (_with(template=None, writer="codex"), r"'codex' is not this client's .* 'env'"),
        (CODEX_AS_JSON, r"language 'json' does not fit writer 'codex'"),
        ({**MINE, "transports": ["stdio"]}, r"transports must include http"),
        ({k: v for k, v in MINE.items() if k != "connect"}, r"kind 'editor' needs"),
        ({**MINE, "install": {"command": "code"}}, r"kind 'editor' needs"),
    ],
)
def test_a_connect_table_that_cannot_be_used_is_named(data: dict[str, object], error: str) -> None:
    with pytest.raises(DefinitionError, match=rf"^mine.toml: .*{error}"):
        parse(data, "mine.toml")
