"""The community client database against what the lab observed: ``mcp-lab clients
export --format mcp-client-capabilities`` and ``mcp-lab clients declared``.

The database is the real npm package ``mcp-client-capabilities`` at the lab's pin,
installed into the clients' cache on first use (with ``CI=true`` a package that cannot
be installed is a failure, elsewhere the tests skip). The history is a real SQLite
file written by ``CLIENT_HISTORY.record`` with rows made here. The export is checked
by the package's own validator under node and against its own types under ``tsc``
(capabilities_support); keyed by the name sent: test_capabilities_sent.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from mcp_lab.runners.clients import capabilities
from mcp_lab.runners.clients.history import CLIENT_HISTORY
from mcp_lab.runners.clients.pins import CLIENTS
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
)
from tests.support.lab import ROOT


@pytest.fixture(scope="module")
def database() -> capabilities.Database:
    return pinned_database()


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "history.sqlite3"
    monkeypatch.setenv(HISTORY_ENV, str(where))
    return where


def test_the_database_is_the_installed_package_read_as_data(
    database: capabilities.Database,
) -> None:
    assert database.version == capabilities.PIN
    # Installed into the clients' cache, never a copy in the repository.
    assert not database.root.resolve().is_relative_to(ROOT.resolve())
    # 0.0.14 as published: 42 clients, 13 declare resources, none declares subscribe.
    assert len(database.clients) == 42
    declaring = [n for n, e in database.clients.items() if "resources" in e]
    assert len(declaring) == 13
    assert not [n for n, e in database.clients.items() if e.get("resources", {}).get("subscribe")]
    # The schema is the package's own types (dist/types.d.ts), and every published entry
    # passes it.
    assert database.schema["required"] == ["title", "url", "protocolVersion"]
    assert set(database.schema["properties"]["resources"]["properties"]) == {
        "listChanged",
        "subscribe",
    }
    for entry in database.clients.values():
        jsonschema.validate(entry, database.schema)


def test_the_export_passes_the_packages_own_types_under_tsc_and_its_validator(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    CLIENT_HISTORY.record(
        [row("claude-code", "2.1.197", READ), row("inspector", "2.12.0", SUBSCRIBED)]
    )
    exported, lab, _ = export_files(tmp_path, capsys)
    assert set(exported) == {"claude-code", "inspector-cli"}
    for entry in exported.values():
        jsonschema.validate(entry, database.schema)
        assert "experimental" not in entry  # not in McpClientRecord: the lab's go beside
    # The lab's fields are in a file beside it, keyed alike.
    assert capabilities.lab_file(tmp_path / "export.json").name == "export.mcp-subscribe-lab.json"
    assert set(lab["clients"]) == set(exported)
    # The package's own validator (dist/validate.js, its `npm test`) over the export, in a
    # copy of the package whose data file is the export.
    said = run_validator(database, (tmp_path / "export.json").read_text(), tmp_path / "v")
    assert "Found 2 client(s)" in said
    # Its own types, under tsc --strict: the file imported as ClientsIndex, each entry
    # as an McpClientRecord literal.
    checked = run_types(database, exported, tmp_path / "ts")
    assert checked.startswith("0\n"), checked
    # The check is real: an entry with a key the types lack (as every entry had,
    # "experimental", before) is refused, TS2353.
    with_lab = {name: {**entry, "experimental": {capabilities.LAB_KEY: {}}}
                for name, entry in exported.items()}  # fmt: skip
    refused = run_types(database, with_lab, tmp_path / "ts-refused")
    assert not refused.startswith("0\n") and refused.count("TS2353") == 2, refused


def test_an_entry_outside_the_types_is_refused(database: capabilities.Database) -> None:
    good = {"title": "T", "url": "u", "protocolVersion": "2025-11-25", "resources": {}}
    capabilities.validate({"x": good}, database)
    for bad in (
        {**good, "observed": {}},  # a key the types do not have
        {**good, "experimental": {}},  # the validator takes it, the types do not
        {**good, "resources": {"notified": True}},
        {**good, "resources": {"subscribe": "yes"}},
        {"title": "T", "url": "u"},  # no protocolVersion
    ):
        with pytest.raises(capabilities.DatabaseError):
            capabilities.validate({"x": bad}, database)


def test_the_export_takes_the_newest_version_single_http_and_its_best_setup(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    CLIENT_HISTORY.record(
        [row("claude-code", "2.1.88", SUBSCRIBED, level=6)], when="2026-12-01T10:00:00Z"
    )
    CLIENT_HISTORY.record(
        [
            row("claude-code", "2.1.197", READ, level=3),
            row("claude-code", "2.1.197", {**READ, "subscribed": "yes"}, level=4, setup="tool"),
            row("claude-code", "2.1.197", SUBSCRIBED, level=6, transport="stdio"),
            row("claude-code", "2.1.197", SUBSCRIBED, level=6, scenario="repeated"),
        ],
        when="2026-12-02T10:00:00Z",
    )
    failed = row("claude-code", "2.1.197", {}, setup="tool").fail("could not start")
    CLIENT_HISTORY.record([failed], when="2026-12-03T10:00:00Z")
    exported, beside, _ = export_files(tmp_path, capsys)
    entry = exported["claude-code"]
    assert entry["title"] == database.clients["claude-code"]["title"]
    assert entry["url"] == database.clients["claude-code"]["url"]
    assert entry["protocolVersion"] == "2025-11-25"
    assert entry["resources"] == {"subscribe": True}
    assert beside["database"] == f"{capabilities.PACKAGE}@{capabilities.PIN}"
    lab = beside["clients"]["claude-code"]
    assert (lab["client"], lab["version"], lab["scenario"], lab["setup"], lab["transport"]) == (
        "claude-code",
        "2.1.197",
        "single",
        "tool",
        "http",
    )
    assert lab["observed"] == {
        "listed": True,
        "read": True,
        "subscribed": True,
        "notified": False,
        "re_read": False,
        "listChanged": None,
    }
    assert lab["level"] == 4
    assert lab["recorded"] == "2026-12-02T10:00:00Z"
    assert lab["lab_version"]
    assert lab["runs"] == {"scored": "claude-code-2.1.197/single/tool/http"}  # no local path
    assert lab["in_database"] == f"{capabilities.PACKAGE}@{capabilities.PIN}"


def test_a_client_the_database_lacks_gets_its_package_as_url(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    CLIENT_HISTORY.record(
        [row("inspector", "2.12.0", {"connected": "yes"}), row("ideal-client", "1", READ)]
    )
    exported, beside, err = export_files(tmp_path, capsys)
    # ideal-client has no client file: its clientInfo name is not known, so it is left out.
    assert set(exported) == {"inspector-cli"}
    entry = exported["inspector-cli"]
    assert entry["url"] == "pkg:npm/%40modelcontextprotocol/inspector@2.12.0"
    assert "resources" not in entry  # neither listed nor read
    assert beside["clients"]["inspector-cli"]["in_database"] is None
    assert "left out ideal-client:" in err and "--client-file" in err


def test_a_hostile_client_info_name_reaches_stderr_cut_on_one_line(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two clients send one client-chosen name: the note that says so quotes it.
    hostile = "evil\x1b[31m\x00\nmcp-lab: forged line" + "x" * 100_000
    base = CLIENTS["inspector"]
    clients = {name: replace(base, name=name, client_info=hostile) for name in ("lib-a", "lib-b")}
    monkeypatch.setattr(capabilities, "CLIENTS", clients)
    CLIENT_HISTORY.record([row("lib-a", "1.0", READ), row("lib-b", "2.0", SUBSCRIBED)])
    target = tmp_path / "export.json"
    code, _, err = run_cli(["clients", "export", "--output", str(target)], capsys)
    assert code == 0, err[:500]
    noted = [line for line in err.splitlines() if "clientInfo" in line]
    assert len(noted) == 1 and len(noted[0]) < 500, err[:500]
    assert "\x1b" not in err and "\x00" not in err
    assert not any(line.startswith("mcp-lab: forged") for line in err.splitlines())


def test_clients_that_send_one_clientinfo_name_share_its_entry(
    database: capabilities.Database, kept: Path
) -> None:
    # Programs on a client library often keep the library's default name ("mcp").
    base = CLIENTS["inspector"]
    clients = {name: replace(base, name=name, client_info="mcp") for name in ("lib-a", "lib-b")}
    CLIENT_HISTORY.record(
        [row("lib-a", "1.0", READ, level=3), row("lib-b", "2.0", SUBSCRIBED, level=6)]
    )
    found = capabilities.observed(CLIENT_HISTORY.read(kept), clients)
    out, beside, notes = capabilities.export(found, database)
    assert list(out) == ["mcp"] == list(beside)
    assert out["mcp"]["resources"] == {"subscribe": True}  # lib-b's: the best level
    lab = beside["mcp"]
    assert lab["client"] == "lib-b"
    assert [(o["client"], o["observed"]["subscribed"]) for o in lab["same_client_info"]] == [
        ("lib-a", False)
    ]
    assert any("'mcp'" in note and "lib-a" in note and "lib-b" in note for note in notes)
    capabilities.validate(out, database)


def test_the_declared_table_says_match_differs_and_not_in_the_database(
    database: capabilities.Database, kept: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    relisted = [{"key": "relisted", "title": "listed again", "answer": "yes"}]
    CLIENT_HISTORY.record(
        [
            row("claude-code", "2.1.197", READ),  # declares resources, no subscribe
            row("codex", "0.171.0", READ),  # codex-mcp-client declares no resources
            row("opencode", "1.0.0", READ, scenario="list-changed", checks=relisted),
            row("inspector", "2.12.0", SUBSCRIBED),  # inspector-cli: not in the database
            row("ideal-client", "1", READ),  # no client file
        ]
    )
    code, out, err = run_cli(["clients", "declared", "--format", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["database"] == {"package": "mcp-client-capabilities", "version": "0.0.14",
                                "clients": 42}  # fmt: skip
    found = {c["client"]: c for c in data["clients"]}
    assert found["claude-code"]["verdict"] == "match"
    assert found["claude-code"]["declared"] == {
        "resources": True,
        "subscribe": False,
        "listChanged": False,
    }
    assert found["codex"]["verdict"] == "differs"
    assert found["codex"]["differs"] == ["resources"]
    # opencode declares no resources; the lab saw it list, read and list again.
    assert found["opencode"]["observed"]["listChanged"] is True
    assert found["opencode"]["differs"] == ["resources", "listChanged"]
    assert found["inspector"]["verdict"] == "not in the database"
    assert found["inspector"]["declared"] is None
    assert found["ideal-client"]["verdict"] == "clientInfo unknown"

    code, out, err = run_cli(["clients", "declared"], capsys)
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["claude-code"].rstrip().endswith("match")
    assert "yes/yes" in lines["claude-code"] and "no/no" in lines["claude-code"]
    assert lines["codex"].rstrip().endswith("differs: resources")
    assert lines["inspector"].rstrip().endswith("not in the database")
    assert "none declares subscribe" in out or "0 declare subscribe" in out


def test_nothing_kept_is_said_and_nothing_is_written(
    database: capabilities.Database,
    kept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "export.json"
    code, _, err = run_cli(["clients", "export", "--output", str(target)], capsys)
    assert code == 1
    assert "no clients run kept yet" in err
    assert not target.exists()


def test_a_database_that_cannot_be_installed_is_one_line_and_exit_1(
    kept: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(tmp_path / "clients"))
    CLIENT_HISTORY.record([row("claude-code", "2.1.197", READ)])
    args = ["clients", "declared", "--database-version", "0.0.0-no-such-version"]
    code, out, err = run_cli(args, capsys)
    assert code == 1
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("mcp-lab: the client database mcp-client-capabilities@0.0.0-no-such-")
    assert "could not be installed" in err


def test_the_types_reader_refuses_a_form_it_does_not_know() -> None:
    schema = capabilities.record_schema(
        "/** doc */\nexport interface McpClientRecord {\n  title: string;\n  a?: { b?: boolean; };"
        "\n  c?: {};\n}\n"
    )
    assert schema["required"] == ["title"]
    assert schema["properties"]["a"]["additionalProperties"] is False
    with pytest.raises(capabilities.DatabaseError, match="string \\|"):
        capabilities.record_schema("export interface McpClientRecord { title: string | null; }")
    with pytest.raises(capabilities.DatabaseError, match="McpClientRecord"):
        capabilities.record_schema("export interface Other { title: string; }")
