"""``mcp-lab clients run``: each real agent CLI against a fresh lab, offline.

For one client the runner installs the pinned version from the npm registry (once,
into ``~/.cache/mcp-lab/clients/<name>-<version>``), starts a lab and the scripted
model (:mod:`services.clients.model`) on loopback, writes the CLI's config into a
HOME of its own, and runs the CLI non-interactively with a timeout. When the model
receives the first tool result, the runner publishes the lab's update (target ``*``)
while the CLI is still connected. The row joins the lab's evidence for that client
(levels 1-6) with what the model saw (level 7: the new content reached the model).
Each client runs once per scenario (:data:`~services.clients.matrix.SCENARIOS`): a lab
without the server's tool, then one with it (``MCP_TEST_ENABLE_TOOL=true``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from services import contract
from services.catalog import REVIEW_STATUS
from services.clients import drivers
from services.clients.lab import Lab, Process, running_lab
from services.clients.matrix import SCENARIOS, TOOL_SCENARIO, Row
from services.clients.model import VIA_SERVER_TOOL, ModelRecord, ScriptedModel, serve
from services.clients.pins import CLIENTS, NODE22_VERSION, ClientSpec, node22_package
from services.evidence import scoring

INSTALL_TIMEOUT = 900.0
DEFAULT_RUN_TIMEOUT = 180.0
_TAIL_LINES = 30


def cache_dir() -> Path:
    base = os.environ.get("MCP_LAB_CLIENTS_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "mcp-lab" / "clients"


class InstallError(RuntimeError):
    """npm could not install a client."""


def npm_install(
    name: str, package: str, version: str, binary: str, postinstall: str | None = None
) -> Path:
    """Install ``package@version`` into the prefix ``<cache>/<name>-<version>`` (once);
    returns the path of its ``binary``. Install scripts stay off (some download), except
    ``postinstall``, a local script under node_modules run with node afterwards."""
    prefix = cache_dir() / f"{name}-{version}"
    path = prefix / "node_modules" / ".bin" / binary
    done = prefix / ".mcp-lab-installed"
    if done.exists() and path.exists():
        return path
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not on PATH (install Node.js and npm)")
    prefix.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"]
    _checked([*command, str(prefix), f"{package}@{version}"], f"npm install {package}@{version}")
    if postinstall:
        script = prefix / "node_modules" / postinstall
        _checked(["node", str(script)], f"{package} install script", cwd=script.parent)
    if not path.exists():
        raise InstallError(f"npm install {package}@{version} made no {binary}")
    done.write_text(f"{package}@{version}\n")
    return path


def _checked(argv: list[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-10:])
        raise InstallError(f"{what} failed ({result.returncode}):\n{tail}")


@dataclass
class Outcome:
    """What one run produced, before it is turned into a row."""

    events: list[contract.Event]
    record: ModelRecord | None
    exit_code: int | None
    output: list[str]
    timed_out: bool = False
    error: str | None = None


def _base_env(home: Path, extra_path: list[Path]) -> dict[str, str]:
    """A clean environment: nothing of the caller's but PATH, HOME of the run's own."""
    path = os.pathsep.join([*(str(p) for p in extra_path), os.environ.get("PATH", "")])
    env = {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TMPDIR": str(home / "tmp"),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    return env


async def _run_cli(
    name: str, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> tuple[Process, bool]:
    """Run a CLI to its end (or kill it after ``timeout``); returns it and whether it timed out."""
    process = await Process.start(name, argv, env, cwd)
    try:
        await asyncio.wait_for(process.process.wait(), timeout)
        timed_out = False
    except TimeoutError:
        timed_out = True
    await process.stop()
    return process, timed_out


async def _run_agent(
    spec: ClientSpec, binary: Path, paths: list[Path], root: Path, timeout: float, scenario: str
) -> Outcome:
    driver = drivers.AGENT_DRIVERS[spec.name]
    home, workdir = root / "home", root / "work"
    home.mkdir()
    workdir.mkdir()
    async with running_lab(root, enable_tool=scenario == TOOL_SCENARIO) as lab:
        model = ScriptedModel(drivers.SERVER_NAME, REVIEW_STATUS.uri, lab.publish_update)
        async with serve(model) as model_url:
            dirs = drivers.RunDirs(home, workdir, lab.mcp_url, model_url)
            invocation = driver(str(binary), dirs)
            env = {**_base_env(home, paths), **invocation.env}
            cli, timed_out = await _run_cli(spec.name, invocation.argv, env, workdir, timeout)
        events = await lab.events()
        _keep_logs(spec, scenario, lab, cli.lines, model.record, events)
    return Outcome(events, model.record, cli.process.returncode, cli.lines, timed_out)


async def _run_inspector(
    spec: ClientSpec, binary: Path, paths: list[Path], root: Path, timeout: float, scenario: str
) -> Outcome:
    """The Inspector's CLI needs no model: connect, read, subscribe (it prints each
    update as it arrives; the runner publishes one once the lab recorded the subscribe,
    and stops it after the first), read again, stop its daemon."""
    home, workdir = root / "home", root / "work"
    home.mkdir()
    workdir.mkdir()
    env = {**_base_env(home, paths), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    output: list[str] = []
    async with running_lab(root, enable_tool=scenario == TOOL_SCENARIO) as lab:
        mcpdo = [str(binary), "--plain"]
        conn = ["--connection", drivers.SERVER_NAME]
        uri = REVIEW_STATUS.uri
        steps: list[tuple[str, list[str]]] = [
            ("connect", ["connect", lab.mcp_url, "--transport", "http", *conn]),
            ("read", [*conn, "resources/read", uri]),
        ]
        exit_code: int | None = 0
        timed_out = False
        try:
            for label, args in steps:
                done, timed_out = await _run_cli(label, [*mcpdo, *args], env, workdir, timeout)
                output += [f"$ mcpdo {' '.join(args)}", *done.lines]
                exit_code = done.process.returncode
                if exit_code or timed_out:
                    break
            else:
                since = len(lab.server.lines)
                subscribe = await Process.start(
                    "subscribe", [*mcpdo, *conn, "resources/subscribe", uri], env, workdir
                )
                try:
                    await lab.server.wait_for(r"\[resources/subscribe\]", timeout, since)
                    await lab.publish_update()
                    # It keeps listening after the first update: stopped once it printed one.
                    await subscribe.wait_for(r"Resource updated", timeout)
                except TimeoutError:
                    timed_out = True
                await subscribe.stop()
                output += [f"$ mcpdo {' '.join(conn)} resources/subscribe {uri}", *subscribe.lines]
                if not timed_out:
                    again, timed_out = await _run_cli(
                        "read", [*mcpdo, *conn, "resources/read", uri], env, workdir, timeout
                    )
                    output += ["$ mcpdo resources/read (again)", *again.lines]
                    exit_code = again.process.returncode
        finally:
            stop, _ = await _run_cli("daemon", [*mcpdo, "daemon", "stop"], env, workdir, 30)
            output += ["$ mcpdo daemon stop", *stop.lines]
        events = await lab.events()
        _keep_logs(spec, scenario, lab, output, None, events)
    return Outcome(events, None, exit_code, output, timed_out)


def runs_dir(name: str, scenario: str) -> Path:
    """Where the last run of client ``name`` in ``scenario`` keeps its logs."""
    return cache_dir() / "runs" / name / scenario.replace(" ", "-")


def _keep_logs(
    spec: ClientSpec,
    scenario: str,
    lab: Lab,
    cli: list[str],
    record: ModelRecord | None,
    events: list[contract.Event],
) -> None:
    """The last run's logs and evidence, under the cache: for reading the wire by hand."""
    where = runs_dir(spec.name, scenario)
    where.mkdir(parents=True, exist_ok=True)
    (where / "cli.log").write_text("\n".join(cli) + "\n")
    (where / "server.log").write_text("\n".join(lab.server.lines) + "\n")
    (where / "updater.log").write_text("\n".join(lab.updater.lines) + "\n")
    lines = [json.dumps(asdict(e)) for e in events]
    (where / "events.jsonl").write_text("".join(f"{line}\n" for line in lines))
    if record is not None:
        (where / "model.json").write_text(json.dumps(record.to_json(), indent=2) + "\n")


def to_row(spec: ClientSpec, version: str, scenario: str, outcome: Outcome, seconds: float) -> Row:
    """Join the lab's scores of the client with what its model saw."""
    row = Row(spec.name, version, scenario, exit_code=outcome.exit_code, seconds=round(seconds, 1))
    clients = scoring.score_clients(outcome.events)
    mine = [c for c in clients if c.client == spec.client_info] or [
        c for c in clients if c.client != "unknown"
    ]
    if mine:
        best = max(mine, key=lambda c: c.level)
        session = best.best
        row.client_info = f"{best.client}/{best.version}"
        row.protocol, row.transport = session.protocol, session.transport
        row.server_level = row.level = best.level
        row.sessions = sum(len(c.sessions) for c in mine)
        row.notes += best.notes
    else:
        row.notes.append("never connected to the lab")
    record = outcome.record
    if record is not None:
        row.model = record.to_json()
        row.model_saw_v1, row.model_saw_v2 = record.saw_v1, record.saw_v2
        if record.saw_v2:
            row.level = 7
            marks = session.checkpoints if mine else dict.fromkeys(scoring.CHECKPOINTS)
            missing = [name for name in ("subscribed", "notified") if marks[name] is None]
            row.notes.append(
                "level 7: version 2 reached the model (a re-read it asked for)"
                + (f", without: {', '.join(missing)}" if missing else "")
            )
        if record.read_tool is not None:
            whose = "the server's tool" if record.read_via == VIA_SERVER_TOOL else "its tool"
            row.notes.append(f"the model used {whose} {record.read_tool}")
        if record.tool_results and not record.versions_seen:
            first = record.tool_results[0].replace("\n", " ")
            row.notes.append(f"the read tool gave the model no resource content: {first[:120]}")
        if record.tools_offered and record.read_tool is None:
            row.notes.append(
                "no resource-read tool (nor the server's tool) offered to the model: "
                f"{record.tools_offered}"
            )
        if not record.tools_offered:
            row.notes.append("the model was never offered a tool")
        if record.update_error:
            row.notes.append(f"update failed: {record.update_error}")
    if outcome.timed_out:
        row.notes.append("timed out; killed")
    elif outcome.exit_code:
        tail = " | ".join(line for line in outcome.output[-3:] if line.strip())
        row.notes.append(f"exit code {outcome.exit_code}: {tail[:200]}")
    if outcome.error:
        row.notes.append(outcome.error)
    return row


async def _install(spec: ClientSpec, version: str) -> tuple[Path, list[Path]]:
    """The client's binary, and the directories its run puts first on PATH."""
    assert spec.package is not None
    binary = await asyncio.to_thread(
        npm_install, spec.name, spec.package, version, spec.binary, spec.local_postinstall
    )
    paths = [binary.parent]
    if spec.needs_node22:
        node = await asyncio.to_thread(
            npm_install, "node", node22_package(), NODE22_VERSION, "node"
        )
        paths.insert(0, node.parent)
    return binary, paths


async def run_client(
    spec: ClientSpec, version: str, timeout: float, scenarios: tuple[str, ...] = SCENARIOS
) -> list[Row]:
    """One client's rows, one per scenario (one row that says why, when it could not be
    installed)."""
    if spec.not_installable or spec.package is None:
        return [Row(spec.name, version, "-", notes=[spec.not_installable or "no package"])]
    try:
        binary, paths = await _install(spec, version)
    except (InstallError, subprocess.TimeoutExpired) as exc:
        return [Row(spec.name, version, "-", notes=[f"install failed: {exc}"])]
    runner = _run_agent if spec.uses_model else _run_inspector
    rows = []
    for scenario in scenarios:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"mcp-lab-{spec.name}-") as root:
            try:
                outcome = await runner(spec, binary, paths, Path(root), timeout, scenario)
            except OSError as exc:  # the CLI would not start; the other runs still go on
                notes = [f"could not run {spec.binary}: {exc}"]
                rows.append(Row(spec.name, version, scenario, notes=notes))
                continue
        rows.append(to_row(spec, version, scenario, outcome, time.monotonic() - started))
    return rows


async def run_clients(
    names: list[str],
    versions: dict[str, str],
    timeout: float,
    scenarios: tuple[str, ...] = SCENARIOS,
) -> list[Row]:
    """Rows of ``names`` in each scenario, one run after the other (each run owns the
    machine while it runs)."""
    rows = []
    for name in names:
        spec = CLIENTS[name]
        rows += await run_client(spec, versions.get(name, spec.version), timeout, scenarios)
    return rows
