"""``mcp-lab clients export`` and ``declared`` key a client by the ``clientInfo`` name
it sent (issue 42, items 4, 8 and 13): the row's note where it sent another than its
client file expects (Kilo sends OpenCode's), a user's client file given with
``--client-file`` like a built-in one, a name a client chose (``__proto__``) a plain key
where JavaScript loads the file (node), and no local path in what is meant to be shared.

Real package, real history file, real node and tsc (capabilities_support)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcp_lab.runners.clients import capabilities
from mcp_lab.runners.clients.history import CLIENT_HISTORY
from mcp_lab.runners.history_store import HISTORY_ENV
from tests.runners.clients.capabilities_support import (
    READ,
    SUBSCRIBED,
    export_files,
    pinned_database,
    row,
    run_cli,
    run_types,
    run_validator,
    tool,
)

# What verdict.py notes of a client that sent another name than its file's client_info.
KILO_SENT = "sent clientInfo opencode/7.0.33 (expected kilo)"


@pytest.fixture(scope="module")
def database() -> capabilities.Database:
    return pinned_database()


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "history.sqlite3"
    monkeypatch.setenv(HISTORY_ENV, str(where))
    return where


def client_file(where: Path, name: str, client_info: str, command: str = "my-agent") -> Path:
    path = where / f"{name}.toml"
    path.write_text(
        f'name = {json.dumps(name)}\ntitle = "Mine"\nkind = "program"\n'
        f"client_info = {json.dumps(client_info)}\n"
        f'[install]\ncommand = {json.dumps(command)}\n[run]\nargv = ["{{binary}}"]\n'
    )
    return path


def test_kilo_is_exported_and_compared_under_the_clientinfo_it_sent(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    CLIENT_HISTORY.record([row("kilo", "7.0.33", READ, notes=[KILO_SENT])])
    exported, beside, err = export_files(tmp_path, capsys)
    assert list(exported) == ["opencode"]  # not "kilo", the name the lab expected
    assert exported["opencode"]["title"] == database.clients["opencode"]["title"]
    lab = beside["clients"]["opencode"]
    assert (lab["client"], lab["expected_client_info"]) == ("kilo", "kilo")
    assert lab["in_database"] == f"{capabilities.PACKAGE}@{capabilities.PIN}"
    assert "kilo sent clientInfo 'opencode', its client file expects 'kilo'" in err

    code, out, err = run_cli(["clients", "declared", "--format", "json"], capsys)
    assert code == 0, err
    (kilo,) = json.loads(out)["clients"]
    assert (kilo["client_info"], kilo["expected_client_info"]) == ("opencode", "kilo")
    # opencode is in the database and declares no resources; Kilo read one.
    assert (kilo["verdict"], kilo["differs"]) == ("differs", ["resources"])
    code, out, err = run_cli(["clients", "declared"], capsys)
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("kilo ")]
    assert "opencode (expected kilo)" in line and line.endswith("differs: resources"), out


def test_the_sent_name_is_read_from_the_rows_note(kept: Path) -> None:
    def sent(*notes: str, answers: dict[str, str] = READ) -> list[str]:
        CLIENT_HISTORY.record([row("cline", "3.0.65", answers, notes=list(notes))])
        (entry,) = CLIENT_HISTORY.read(kept)[-1:]
        return capabilities.observed([entry])["cline"].sent

    assert sent() == ["@cline/core"]  # its file's, as no note says otherwise
    assert sent("sent clientInfo @other/core/1.0 (expected @cline/core)") == ["@other/core"]
    assert sent("sent clientInfo a/1, b/2 (expected @cline/core)") == ["a", "b"]
    assert sent(answers={"connected": "no"}) == []  # never connected: it sent nothing


def test_a_users_client_file_is_exported_keyed_by_what_its_client_sent(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A client-chosen name that JavaScript's object literals would take as the prototype.
    mine = client_file(tmp_path, "evil1", "__proto__")
    CLIENT_HISTORY.record([row("evil1", "1.0", SUBSCRIBED), row("evil2", "1.0", READ)])
    exported, beside, err = export_files(tmp_path / "a", capsys, "--client-file", str(mine))
    assert list(exported) == ["__proto__"], err
    assert exported["__proto__"]["title"] == "Mine"
    assert exported["__proto__"]["url"] == "pkg:generic/evil1@1.0"
    assert beside["clients"]["__proto__"]["client"] == "evil1"
    assert "left out evil2:" in err and "--client-file FILE" in err

    # Loaded in JavaScript (require, as the package's index.js does; JSON.parse), the
    # name is a plain key of its own, the object's prototype untouched.
    node = tool("node")
    target = tmp_path / "a" / "export.json"
    script = (
        "const fs = require('fs'); const path = process.argv[1];"
        "const all = [require(path), JSON.parse(fs.readFileSync(path, 'utf8'))];"
        "console.log(JSON.stringify(all.map((d) => [Object.keys(d),"
        " Object.prototype.hasOwnProperty.call(d, '__proto__'),"
        " Object.getPrototypeOf(d) === Object.prototype, d['__proto__'].title])));"
    )
    done = subprocess.run([node, "-e", script, str(target)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[["__proto__"], True, True, "Mine"]] * 2
    said = run_validator(database, target.read_text(), tmp_path / "v")
    assert "Found 1 client(s): __proto__" in said
    checked = run_types(database, exported, tmp_path / "ts")
    assert checked.startswith("0\n"), checked

    # Without its file, the row is left out, saying how to give it; declared alike.
    target_b = tmp_path / "b.json"
    code, _, err = run_cli(["clients", "export", "--output", str(target_b)], capsys)
    assert code == 0, err
    assert "left out evil1:" in err and "--client-file FILE" in err
    assert json.loads(target_b.read_text()) == {}
    args = ["clients", "declared", "--format", "json", "--client-file", str(mine)]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    found = {c["client"]: c for c in json.loads(out)["clients"]}
    assert (found["evil1"]["client_info"], found["evil1"]["verdict"]) == (
        "__proto__",
        "not in the database",
    )
    assert found["evil2"]["verdict"] == "clientInfo unknown"


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def test_nothing_shared_names_a_local_path(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home" / "someone"
    command = home / "bin" / "my-agent"  # a client run from a command of the user's
    mine = client_file(tmp_path, "mine", "my-agent", command=str(command))
    runs = home / ".cache" / "mcp-lab" / "clients" / "runs" / "20261202T101500Z-4242"
    folders = {
        "scored": str(runs / "mine-1.0" / "single" / "no tool" / "http"),
        "pull": str(runs / "mine-1.0" / "single" / "no tool" / "http-pull"),
    }
    CLIENT_HISTORY.record([row("mine", "1.0", READ, runs=folders)])
    exported, beside, _ = export_files(tmp_path / "out", capsys, "--client-file", str(mine))
    assert list(exported) == ["my-agent"]
    lab = beside["clients"]["my-agent"]
    assert lab["runs"] == {
        "scored": "20261202T101500Z-4242/mine-1.0/single/no tool/http",
        "pull": "20261202T101500Z-4242/mine-1.0/single/no tool/http-pull",
    }
    for text in [*strings(exported), *strings(beside)]:
        assert not text.startswith("/") and str(home) not in text, text
        assert "someone" not in text and str(tmp_path) not in text, text


def test_a_row_that_says_what_it_sent_needs_no_client_file(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sent = "sent clientInfo my-agent/2.0 (expected mine)"
    never = {"connected": "no"}
    CLIENT_HISTORY.record([row("mine", "2.0", READ, notes=[sent]), row("gone", "1", never)])
    exported, beside, err = export_files(tmp_path, capsys)
    assert exported == {
        "my-agent": {
            "title": "mine",
            "url": "pkg:generic/mine@2.0",
            "protocolVersion": "2025-11-25",
            "resources": {"subscribe": False},
        }
    }
    assert beside["clients"]["my-agent"]["client"] == "mine"
    assert "left out gone: it never connected to the lab" in err
    code, out, err = run_cli(["clients", "declared", "--format", "json"], capsys)
    assert code == 0, err
    found = {c["client"]: c for c in json.loads(out)["clients"]}
    assert found["mine"]["client_info"] == "my-agent"
    assert found["gone"]["verdict"] == "not observed (never connected)"


def test_the_clientinfo_kept_with_the_row_needs_no_note_and_no_client_file(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A row of a user's client file (not given again) whose client sent the name the
    file expects: the history keeps the clientInfo sent, so the export has it (it was
    left out: no note, no file known)."""
    made = row("mine", "2.0", READ)
    made.client_info = "my-agent/2.0"
    CLIENT_HISTORY.record([made])
    (entry,) = CLIENT_HISTORY.read(kept)
    assert entry.client_info == "my-agent/2.0"
    exported, beside, err = export_files(tmp_path, capsys)
    assert list(exported) == ["my-agent"], err
    assert beside["clients"]["my-agent"]["client"] == "mine"
