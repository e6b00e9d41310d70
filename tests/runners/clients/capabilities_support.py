"""What the tests of ``mcp-lab clients export`` / ``declared`` share: rows made here,
the command run in-process, and the package's own checks of an export run for real:
its validator (``dist/validate.js``) under node, and its types (``dist/index.d.ts``,
``dist/types.d.ts``) under TypeScript's ``tsc``, installed from npm into the clients'
cache at :data:`TYPESCRIPT` (the package's own devDependency, ``^5.9.2``). With
``CI=true`` a missing node, npm or TypeScript is a failure, elsewhere the test skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcp_lab.cli.main import main
from mcp_lab.runners.clients import capabilities
from mcp_lab.runners.clients.matrix import CHECKLIST, Check, ClientRow
from mcp_lab.runners.install import InstallError
from tests.support.ci import IN_CI

TYPESCRIPT = "5.9.3"
READ = {"connected": "yes", "listed": "yes", "read": "yes"}
SUBSCRIBED = {**READ, "subscribed": "yes", "notified": "yes", "re_read": "yes"}


def pinned_database() -> capabilities.Database:
    """The pinned database, installed on first use."""
    try:
        return capabilities.load(capabilities.PIN)
    except (InstallError, capabilities.DatabaseError) as exc:
        missing(f"the client database is not installable: {exc}")
    raise AssertionError("unreachable")


def missing(why: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and {why}")
    pytest.skip(why)


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        missing(f"no {name} on PATH")
    assert found is not None
    return found


def row(
    client: str,
    version: str,
    answers: dict[str, str],
    *,
    level: int = 3,
    scenario: str = "single",
    setup: str = "no tool",
    transport: str = "http",
    checks: list[dict[str, Any]] | None = None,
    notes: list[str] | None = None,
    runs: dict[str, str] | None = None,
) -> ClientRow:
    made = ClientRow(client, version, scenario, setup, protocol="2025-11-25", transport=transport)
    made.level = made.server_level = level
    made.checklist = {key: Check(answers.get(key, "no"), 1.0) for key in CHECKLIST}
    made.checks = checks or []
    made.notes = notes or []
    made.runs = runs or {"scored": f"/runs/{client}-{version}/{scenario}/{setup}/{transport}"}
    return made


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_code:
        main(args)
    out, err = capsys.readouterr()
    return int(exit_code.value.code or 0), out, err


def export_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``clients export --output`` run: the export, the lab's file beside it, stderr."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "export.json"
    code, _, err = run_cli(["clients", "export", "--output", str(target), *extra], capsys)
    assert code == 0, err
    beside = tmp_path / f"export.{capabilities.LAB_KEY}.json"  # ({} when there is none)
    lab = json.loads(beside.read_text()) if beside.exists() else {}
    return json.loads(target.read_text()), lab, err


def run_validator(db: capabilities.Database, exported_text: str, where: Path) -> str:
    """The package's own validator over ``exported_text`` as its data file; its stdout."""
    node = tool("node")
    copy = where / "dist"
    shutil.copytree(db.root / "dist", copy)
    (copy / "mcp_client_capabilities" / "mcp-clients.json").write_text(exported_text)
    checked = subprocess.run(
        [node, str(copy / "validate.js")], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return checked.stdout


def tsc() -> list[str]:
    """TypeScript's compiler, installed once into the clients' cache."""
    node = tool("node")
    tool("npm")
    try:
        root = capabilities.install(TYPESCRIPT, "typescript")
    except InstallError as exc:
        missing(f"typescript@{TYPESCRIPT} is not installable: {exc}")
    return [node, str(root / "bin" / "tsc")]


def run_types(db: capabilities.Database, exported: dict[str, Any], where: Path) -> str:
    """``tsc --strict`` over the export against the package's types, both ways a user
    meets them: the JSON file imported as the package's ``ClientsIndex`` (as its own
    index.ts does), and each entry as an object literal typed ``McpClientRecord``
    (where TypeScript refuses a key the interface lacks: TS2353). Its output, with
    its exit code first."""
    where.mkdir(parents=True)
    for name in ("index.d.ts", "types.d.ts"):
        shutil.copy(db.root / "dist" / name, where / name)
    (where / "export.json").write_text(json.dumps(exported, indent=2))
    literals = ",\n".join(json.dumps(entry, indent=2) for entry in exported.values())
    (where / "check.ts").write_text(
        'import type { ClientsIndex, McpClientRecord } from "./index";\n'
        'import data from "./export.json";\n'
        "export const imported: ClientsIndex = data;\n"
        f"export const entries: McpClientRecord[] = [\n{literals}\n];\n"
    )
    argv = [*tsc(), "--noEmit", "--strict", "--resolveJsonModule", "--esModuleInterop",
            "--module", "commonjs", "--moduleResolution", "node", "--target", "es2020",
            "--pretty", "false", str(where / "check.ts")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    return f"{done.returncode}\n{done.stdout}{done.stderr}"
