"""``mcp-lab clients sweep`` over a client of our own whose behaviour changes at a known
version, with no network: its versions come from an ``npm`` of the test's own (it
answers ``npm view``), each version is already installed in the clients cache (as
``npm install`` leaves it: a prefix with its ``.bin`` and the runner's marker), and each
is a real program (``tests/support/fake_agent.py``) run through the real runner against a fresh
lab. Before 1.3.0 it reads only when its model asks; from 1.3.0 on it subscribes and
pushes the update to its model. The sweep must bisect to 1.3.0 without running every
version, keep what it ran in the history, and ``clients history`` must mark the change."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mcp_lab.cli.main import main
from mcp_lab.runners.clients import pins
from tests.support.fakes import (
    CHANGES_AT,
    NAME,
    PACKAGE,
    VERSIONS,
    fake_npm,
    install_fakes,
    sweep_agent,
)

# The versions a bisection of the whole range runs: its ends, then the middles.
BISECTED = ["1.0.0", "1.5.0", "1.2.0", "1.3.0"]


@pytest.fixture
def fake_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake client known to the lab as ``fake-sweep``; returns the npm call log."""
    cache, calls = tmp_path / "clients", tmp_path / "npm-calls.log"
    install_fakes(cache)
    fake_npm(tmp_path / "bin", calls)
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(cache))
    monkeypatch.setenv("MCP_LAB_HISTORY", str(tmp_path / "history.sqlite3"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(pins.CLIENTS, NAME, sweep_agent())
    return calls


def mcp_lab(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_code:
        main(list(argv))
    out = capsys.readouterr().out
    assert exit_code.value.code == 0, out
    return out


# Four runs of a lab and an agent, one after another: about 60 s alone, past the
# default 120 s bound while two more test workers share 2 cores.
@pytest.mark.timeout(360)
def test_the_sweep_bisects_to_the_version_where_the_client_changed(
    fake_client: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = mcp_lab(
        capsys, "clients", "sweep", "--client", NAME, "--tool", "off", "--observe", "3",
        "--timeout", "120", "--format", "json", "--quiet",
    )  # fmt: skip
    done = json.loads(out)
    assert done["versions"] == VERSIONS and done["failed"] == []
    assert done["run_order"] == BISECTED  # 4 of the 6
    levels = {v: [r["level"] for r in rows] for v, rows in done["rows"].items()}
    assert levels == {"1.0.0": [3], "1.2.0": [3], "1.3.0": [7], "1.5.0": [7]}, done["rows"]
    changed = {c["key"]: (c["before"], c["after"], c["version"], c["exact"])
               for c in done["changes"]}  # fmt: skip
    assert changed == {
        "level": ("3", "7", CHANGES_AT, True),
        "subscribed": ("no", "yes", CHANGES_AT, True),
        "notified": ("no", "yes", CHANGES_AT, True),
        "re_read": ("no", "yes", CHANGES_AT, True),
        "reflected": ("no", "push", CHANGES_AT, True),
    }, done["changes"]
    # Nothing was installed: npm was asked for the version list and the latest only.
    assert fake_client.read_text().splitlines() == [
        f"view {PACKAGE} versions --json",
        f"view {PACKAGE}@latest version",
    ]

    # What it ran is in the history, each row the client's own (its clientInfo version).
    kept = json.loads(mcp_lab(capsys, "clients", "history", "--client", NAME, "--format", "json"))
    (cell,) = kept["clients"][0]["cells"]
    assert [(e["version"], e["source"], e["level"]) for e in cell["entries"]] == [
        ("1.0.0", "sweep", 3),
        ("1.2.0", "sweep", 3),
        ("1.3.0", "sweep", 7),
        ("1.5.0", "sweep", 7),
    ]
    assert all(e["runs"]["scored"].endswith("/scored") for e in cell["entries"])
    table = mcp_lab(capsys, "clients", "history", "--client", NAME)
    assert (
        "CHANGED 1.3.0: level 3 -> 7; subscribed: no -> yes; notified: no -> yes; "
        "re_read: no -> yes; reflected: no -> push"
    ) in table, table
