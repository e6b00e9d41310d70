"""What a row and the progress say of a run that went wrong, on real processes: a
client that never exits (stopped at --timeout, never "observe"), one that fails at once
(its error line quoted whole, and no checklist answer for a client that never ran), a
stdio client that writes what is no JSON-RPC message (said on its row), and a package
whose platform binary npm never installed (an install failure)."""

from __future__ import annotations

import json
import platform
import re
import shutil
import sys
from pathlib import Path

import pytest

from mcp_lab.runners import run_folders
from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.definition import HTTP, STDIO, ClientDef, parse
from mcp_lab.runners.clients.install import Installed
from mcp_lab.runners.clients.matrix import CHECKLIST, ClientRow
from mcp_lab.runners.clients.runner import run_client
from mcp_lab.runners.clients.verdict import said
from mcp_lab.runners.install import CLIENTS_CACHE, cache_dir
from mcp_lab.scenarios import registry
from tests.support.ci import IN_CI
from tests.support.fakes import FAKE_AGENT

pytestmark = pytest.mark.anyio
SINGLE = registry.get("single")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(tmp_path / "clients"))
    monkeypatch.setenv(run_folders.RUNS_ENV, str(tmp_path / "runs"))


def _client(script: Path, kind: str = "cli", args: tuple[str, ...] = ()) -> ClientDef:
    """A client file's client: this Python running ``script``."""
    argv = ["{binary}", str(script), *args]
    table = {
        "name": f"own-{script.stem}",
        "kind": kind,
        "client_info": "fake-agent",
        "transports": ["http", "stdio"],
        "install": {"command": sys.executable, "version": "0.1.0"},
        "run": {"argv": [*argv, "{prompt}"], "continue": [*argv, "--continue", "{prompt}"]},
    }
    if kind == "cli":
        table["model"] = {"api": "openai-chat"}
    return parse(table, str(script))


async def _rows(
    spec: ClientDef, transport: str, timeout: float, said_lines: list[str]
) -> list[ClientRow]:
    installed = Installed(Path(sys.executable), [], drivers.templated(spec), "0.1.0")
    return await run_client(
        spec, "0.1.0", [SINGLE], runs=run_folders.runs_of("clients", cache_dir(CLIENTS_CACHE)),
        tool="off", observe=1.0, timeout=timeout, installed=installed, transport=transport,
        progress=said_lines.append,
    )  # fmt: skip


async def test_a_cli_that_never_exits_is_stopped_at_the_timeout_and_said_so(
    tmp_path: Path,
) -> None:
    """The fake agent does its whole flow, then hangs: the heartbeat, the row's line and
    its notes say it did not exit and was stopped at --timeout, not that it was observed."""
    hangs = tmp_path / "hangs.py"
    hangs.write_text(
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, {str(FAKE_AGENT)!r}, *sys.argv[1:]])\n"
        "time.sleep(600)\n"
    )
    spec = _client(hangs, args=("--mcp", "{url}", "--model", "{model_url}",
                                "--behaviour", "pull-only"))  # fmt: skip
    lines: list[str] = []
    (row,) = await _rows(spec, HTTP, 22.0, lines)
    assert "did not exit; stopped at --timeout 22 s" in row.notes, row.notes
    assert "pull run: did not exit; stopped at --timeout 22 s" in row.notes, row.notes
    end = [line for line in lines if ": level " in line]
    assert len(end) == 1, lines
    assert end[0].count("run did not exit; stopped at --timeout 22 s") == 2, end
    assert "the scored run did not exit" in end[0] and "the pull run did not exit" in end[0]
    for phases in row.phases.values():  # its time past the window is not "observe"
        assert phases["observe"] <= 2.0 + 1.0 and phases["did not exit"] > 5.0, row.phases
    beats = [line for line in lines if " run: " in line]  # a line every 15 s, per run
    assert beats and not [line for line in beats if re.search(r": observe \((\d\d|[89]) s", line)]
    assert any(re.search(r"run: the observe window \(1 s\) ended \d+ s ago and the client "
                         r"has not exited \(stopped at --timeout 22 s if it does not\)$", line)
               for line in beats), beats  # fmt: skip
    assert re.search(r"observe \d+ s, did not exit \d+ s, teardown", end[0]), end


async def test_a_cli_that_fails_at_once_has_its_error_line_whole_and_no_checklist(
    tmp_path: Path,
) -> None:
    """A client that never ran (it exits 1 before reaching the model or the lab): its
    row has no answer for any box (JSON: none, not "no"), and its note quotes the
    traceback's error line whole, however long the lines before it."""
    broken = tmp_path / "broken.py"
    long_frame = '  File "/venv/lib/python3.13/site-packages/llm_tools_mcp/' + "x" * 230 + '.py"'
    error = ("ImportError: cannot import name 'ClientSession' from 'mcp' "
             "(/venv/lib/python3.13/site-packages/mcp/__init__.py)")  # fmt: skip
    broken.write_text(
        "import sys\n"
        "print('Traceback (most recent call last):')\n"
        f"print({long_frame!r})\n"
        "print('    from mcp import ClientSession')\n"
        f"print({error!r})\n"
        "sys.exit(1)\n"
    )
    (row,) = await _rows(_client(broken), HTTP, 30.0, [])
    assert row.runner_failed is not None and row.level is None
    assert row.runner_failed.startswith("the CLI never reached the scripted model (exit code 1)")
    assert error in row.runner_failed, row.runner_failed
    assert not [k for k, c in row.checklist.items() if c.answer in ("no", "-")], row.checklist
    shown = row.to_json()["checklist"]
    assert all(shown.get(box) is None for box in ("connected", "listed", "read")), shown


def test_a_note_quotes_the_error_line_whole_and_escaped() -> None:
    error = "ValueError: bad \x1b[31mthing "
    out = ["$ agent -p hi", "start", "x" * 300, error + "y" * 120, "exiting"]
    quoted = said(out)  # the error line, escaped, and what fits of the lines around it
    assert quoted == "ValueError: bad \\x1b[31mthing " + "y" * 120 + " | exiting", quoted
    longer = said([*out[:3], error + "y" * 250, "exiting"])  # longer than a note's share
    assert longer == "ValueError: bad \\x1b[31mthing " + "y" * 250, longer
    assert said(["$ agent"]) == "it printed nothing"
    assert said(["one", "two", "three"]) == "one | two | three"


_GARBAGE_CLIENT = """
import json, os, shlex, subprocess, sys
server = subprocess.Popen(shlex.split(os.environ["MCP_LAB_SERVER_COMMAND"]),
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
server.stdin.write(b"Starting my client \\x1b[1mv1\\n")
server.stdin.write(b"debug: second line\\n")
server.stdin.write(b"x" * (17 * 1024 * 1024) + b"\\n")
hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "garbage-client", "version": "1"}}}
server.stdin.write(json.dumps(hello).encode() + b"\\n")
server.stdin.flush()
print(server.stdout.readline()[:200])
server.stdin.close()
server.wait(30)
"""


async def test_a_stdio_clients_lines_that_are_no_message_are_said_on_its_row(
    tmp_path: Path,
) -> None:
    script = tmp_path / "garbage.py"
    script.write_text(_GARBAGE_CLIENT)
    (row,) = await _rows(_client(script, kind="program"), STDIO, 60.0, [])
    notes = [n for n in row.notes if "JSON-RPC" in n or "limit" in n]
    assert notes == [
        "2 line(s) the client wrote to the server were not JSON-RPC (the first: Starting my "
        "client \\x1b[1mv1): passed on, not recorded",
        "1 line(s) the client wrote to the server were over the tap's limit of 16 MiB (the "
        f"longest {17 * 1024 * 1024 + 1} bytes): dropped, not passed on",
    ], row.notes


async def test_a_package_whose_platform_binary_npm_never_installed_is_an_install_failure(
    tmp_path: Path,
) -> None:
    """Kilo Code 7.6.2's platform package is not on the registry: npm installs its
    launcher alone, which finds no binary. That is the install's failure, said so."""
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    if (sys.platform, platform.machine()) != ("linux", "x86_64"):
        pytest.skip("the missing platform package is Kilo's linux-x64 one")
    from mcp_lab.runners.clients.pins import CLIENTS

    lines: list[str] = []
    (row,) = await run_client(
        CLIENTS["kilo"], "7.6.2", [SINGLE], runs=tmp_path / "runs", progress=lines.append
    )
    assert lines == ["kilo 7.6.2: installing", "kilo 7.6.2: install failed"], lines
    assert row.runner_failed is not None and row.level is None
    assert row.runner_failed.startswith(
        "install failed: @kilocode/cli@7.6.2 has no binary for linux-x64"
    ), row.runner_failed
    assert "@kilocode/cli-linux-x64@7.6.2 is not on the npm registry" in row.runner_failed
    shown = json.loads(json.dumps(row.to_json()))["checklist"]
    assert row.checklist == {} and shown == dict.fromkeys(CHECKLIST), shown  # each null
