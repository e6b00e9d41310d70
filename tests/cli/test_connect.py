"""``mcp-lab connect`` in process: what it tells beside the snippet. Gemini CLI (0.61.0,
the pinned one) connects to no MCP server in a folder it does not trust (the lab shows
as Disabled): ``connect gemini-cli`` says whether the folder is trusted, and how to
trust it, from the same files Gemini CLI reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_lab.cli import connect

URL = "http://127.0.0.1:18089/mcp"


def trust_file(home: Path, rules: dict[str, str]) -> None:
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps(rules))


def said(folder: Path, home: Path, **env: str) -> str:
    return " ".join(connect.gemini_trust(folder, home, env))


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
