"""Bridges on versions other than their pins: each version started with its own command
line, a direction a version cannot run shown as ``not supported`` (not ``dropped``), a
failed start quoted by its error, the resumption's note true of a slow bridge, and
supergateway's stateless mode as a row of its own. Spec, verdict and history logic, no
bridge run (the real bridges: test_versions_real.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mcp_lab import protocol
from mcp_lab.contract import Event
from mcp_lab.protocol import Transport
from mcp_lab.runners.bridges import matrix
from mcp_lab.runners.bridges.definition import PATHS
from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
from mcp_lab.runners.bridges.output import bridge_said
from mcp_lab.runners.bridges.run import (
    BridgeOutcome,
    BridgePlan,
    Cut,
    ProbeStep,
    _flow_timeout,
    flow_bound,
)
from mcp_lab.runners.bridges.runner import run_bridge
from mcp_lab.runners.bridges.specs import BRIDGES, STATELESS, Ends, direction
from mcp_lab.runners.bridges.verdict import (
    DROPPED,
    MARKS,
    NOT_APPLICABLE,
    NOT_REACHED,
    NOT_SUPPORTED,
    STEPS,
    BridgeRow,
    StepCell,
    _resume,
    not_supported,
)
from mcp_lab.runners.bridges.waits import Waits
from mcp_lab.scenarios import registry

LAB = ["mcp-lab", "server", "--transport", "stdio"]

# npm mcp-proxy 5.12.5 started with 6.x's command line (``--port P --host H --server
# stream -- mcp-lab server --transport stdio``): its usage text, then what went wrong.
PROXY_5_USAGE = """mcp-proxy <command> [args...]

Run a command with MCP arguments

Positionals:
  command  The command to run                                           [string]
  args     The arguments to pass to the command                         [string]

Options:
  --version                  Show version number                       [boolean]
  --host                     The host to listen on      [string] [default: "::"]
  --server                   The server type to use (sse or stream). By default,
                             both are enabled[string] [choices: "sse", "stream"]
  --streamEndpoint           The stream endpoint to listen on
                                                      [string] [default: "/mcp"]
  --help                     Show help                                 [boolean]

Not enough non-option arguments: got 0, need at least 1""".splitlines()
# mcp-remote 0.1.18 given no URL: an error, then its stack.
REMOTE_CRASH = """[6093] Fatal error: TypeError: Invalid URL
    at new URL (node:internal/url:806:29)
    at parseCommandLineArgs (file:///x/mcp-remote/dist/chunk-OXNXVROF.js:13857:15)
  code: 'ERR_INVALID_URL',
  input: '--help'
}""".splitlines()


def ends(version: str, way: str, tmp_path: Path, port: int | None = 8080) -> Ends:
    d = direction(way)
    lab_url = (
        None if d.lab == "stdio" else f"http://127.0.0.1:9/{PATHS[d.lab].lstrip('/')}"
    )
    lab_command = LAB if d.lab == "stdio" else None
    return Ends(["prog"], d, lab_url, lab_command, port if d.client != "stdio" else None,
                tmp_path, tmp_path, version)  # fmt: skip


@pytest.mark.parametrize(
    ("version", "tail", "path"),
    [
        ("6.7.19", ["--", *LAB], "/mcp"),
        ("5.12.5", ["mcp-lab", "--", "server", "--transport", "stdio"], "/mcp"),
        ("3.3.0", ["--shell", "mcp-lab server --transport stdio"], "/stream"),
    ],
)
def test_npm_mcp_proxy_is_started_with_its_own_majors_command_line(
    version: str, tail: list[str], path: str, tmp_path: Path
) -> None:
    spec = BRIDGES["mcp-proxy"]
    assert spec.launch is not None and spec.why_not(version, direction("HTTP->stdio")) is None
    started = spec.launch(ends(version, "HTTP->stdio", tmp_path))
    assert started.argv[-len(tail) :] == tail
    assert started.client_path == path
    if version.startswith("3."):
        assert "--host" not in started.argv  # 3.x has none (it listens on ::)


@pytest.mark.parametrize(
    ("bridge", "version", "way", "said"),
    [
        ("mcp-proxy", "2.14.3", "HTTP->stdio", "cannot pass options to the server it runs"),
        ("mcp-remote", "0.0.22", "stdio->HTTP", "speaks SSE only"),
        ("supergateway", "2.8.3", "stdio->HTTP", "has no --streamableHttp"),
        ("supergateway", "2.8.3", "HTTP->stdio", "serves no Streamable HTTP"),
        ("supergateway", "3.0.1", "HTTP->stdio", "serves no Streamable HTTP"),
        ("supergateway-stateless", "3.0.1", "HTTP->stdio", "serves no Streamable HTTP"),
    ],
)
def test_a_direction_a_version_cannot_run_is_said_by_its_spec(
    bridge: str, version: str, way: str, said: str
) -> None:
    why = BRIDGES[bridge].why_not(version, direction(way))
    assert why is not None and said in why and version in why


@pytest.mark.parametrize(
    ("bridge", "version", "way"),
    [
        ("mcp-remote", "0.0.22", "stdio->SSE"),
        ("mcp-remote", "0.1.18", "stdio->HTTP"),
        ("supergateway", "3.0.1", "stdio->HTTP"),
        ("supergateway", "3.4.0", "HTTP->stdio"),
        ("mcp-proxy", "3.2.0", "SSE->stdio"),
    ],
)
def test_a_direction_a_version_can_run_is_run(bridge: str, version: str, way: str) -> None:
    assert BRIDGES[bridge].why_not(version, direction(way)) is None
    for spec in BRIDGES.values():  # every pin runs every direction its spec lists
        assert all(spec.why_not(spec.version, d) is None for d in spec.directions), spec.name


def test_mcp_remote_before_its_transport_option_is_started_without_it(tmp_path: Path) -> None:
    spec = BRIDGES["mcp-remote"]
    assert spec.launch is not None
    old = spec.launch(ends("0.0.22", "stdio->SSE", tmp_path)).argv
    assert old == ["prog", "http://127.0.0.1:9/sse"]
    new = spec.launch(ends("0.15.1", "stdio->SSE", tmp_path)).argv
    assert new[-2:] == ["--transport", "sse-only"]


def test_supergateway_stateless_is_a_row_of_its_own(tmp_path: Path) -> None:
    """Its default Streamable HTTP mode (no --stateful): a spec of its own, sharing
    supergateway's install, saying on each row why notifications cannot come."""
    stateless, stateful = BRIDGES["supergateway-stateless"], BRIDGES["supergateway"]
    assert stateless.launch is not None and stateful.launch is not None
    assert [d.name for d in stateless.directions] == ["HTTP->stdio"]
    assert (stateless.package, stateless.version) == (stateful.package, stateful.version)
    assert stateless.install_name == "supergateway"
    argv = stateless.launch(ends("4.0.0", "HTTP->stdio", tmp_path)).argv
    assert "--stateful" not in argv and argv[-2:] == ["--outputTransport", "streamableHttp"]
    assert "--stateful" in stateful.launch(ends("4.0.0", "HTTP->stdio", tmp_path)).argv
    assert stateless.caveat == STATELESS
    assert "keeps no session" in STATELESS and "notifications/resources/updated" in STATELESS


def test_a_failed_start_is_quoted_by_its_error_not_its_usage() -> None:
    assert bridge_said(PROXY_5_USAGE) == "Not enough non-option arguments: got 0, need at least 1"
    assert bridge_said(REMOTE_CRASH) == "[6093] Fatal error: TypeError: Invalid URL"
    assert bridge_said(["listening", "", "  --help  Show help"]) == "listening"
    assert bridge_said([]) == ""


def test_not_supported_is_a_mark_of_its_own_in_every_rendering() -> None:
    assert NOT_SUPPORTED in MARKS and NOT_SUPPORTED not in (DROPPED, NOT_REACHED)
    why = BRIDGES["mcp-remote"].why_not("0.0.22", direction("stdio->HTTP"))
    assert why is not None
    made = not_supported(BRIDGES["mcp-remote"], "0.0.22", "stdio->HTTP", "single", why)
    assert made.not_supported and made.failure is None
    assert {c.mark for c in made.steps.values()} == {NOT_SUPPORTED}
    assert made.notes == [f"not supported: {why}"]
    table = matrix.BRIDGE_MATRIX.table([made])
    assert "not supported" in table.splitlines()[1] and "dropped" not in table
    assert f"| {NOT_SUPPORTED} |" in matrix.BRIDGE_MATRIX.markdown([made])
    shown = json.loads(matrix.BRIDGE_MATRIX.json([made]))["bridges"][0]
    assert set(shown["marks"].values()) == {NOT_SUPPORTED}


@pytest.mark.anyio
async def test_a_version_that_cannot_run_a_direction_is_not_run(tmp_path: Path) -> None:
    """mcp-remote 0.0.22 has no Streamable HTTP: its stdio->HTTP rows say so without a
    lab, a bridge or a run (the program here does not even exist)."""
    lines: list[str] = []
    scenarios = [registry.get("single"), registry.get("repeated")]
    rows = await asyncio.wait_for(
        run_bridge(BRIDGES["mcp-remote"], "0.0.22", scenarios, gate=asyncio.Semaphore(1),
                   runs=tmp_path / "runs", program=[str(tmp_path / "no-such-bridge")],
                   directions=[direction("stdio->HTTP")], progress=lines.append),
        10,
    )  # fmt: skip
    assert [(r.direction, r.scenario) for r in rows] == [
        ("stdio->HTTP", "single"),
        ("stdio->HTTP", "repeated"),
    ]
    assert all(r.not_supported and not r.runs for r in rows)
    assert lines[0].startswith("mcp-remote stdio->HTTP single: not supported: mcp-remote 0.0.22")
    assert not (tmp_path / "runs").exists()


def lab_event(method: str, session: str = "s1", uri: str | None = None) -> Event:
    return Event(1, session, "mcp-lab-probe", "1", "2025-11-25", "streamable-http", "in",
                 method, uri)  # fmt: skip


def test_the_resume_note_says_never_reached_only_when_the_lab_saw_no_subscribe() -> None:
    """mcp-remote 0.1.18 slow to connect: the runner stopped waiting for its subscribe
    before it came. The lab saw it all the same: no "never reached the lab"."""
    plan = BridgePlan(registry.get("single"), direction("stdio->HTTP"), resume=True)
    uri = plan.scenario.read_uri
    late = BridgeOutcome(plan, 0, cut=Cut(waited_s=8.0))
    late.events = [lab_event(protocol.INITIALIZE), lab_event(protocol.SUBSCRIBE, uri=uri)]
    cell = _resume(late, Transport.STREAMABLE_HTTP, StepCell("passed"))
    assert "never reached the lab" not in cell.detail
    assert cell.mark == NOT_APPLICABLE and cell.detail.startswith("not judged")
    assert "after the runner stopped waiting for it (8 s)" in cell.detail
    none = BridgeOutcome(plan, 0, cut=Cut(waited_s=46.0))
    none.events = [lab_event(protocol.INITIALIZE)]
    assert _resume(none, Transport.STREAMABLE_HTTP, StepCell("passed")).detail == (
        "the subscribe never reached the lab"
    )


def test_the_resumption_waits_for_a_slow_bridge_as_long_as_the_flow() -> None:
    """The cut waits for the subscribe as long as the client's whole flow may take (a
    bridge's start and connection included), not one notification's 8 s."""
    plan = BridgePlan(registry.get("single"), direction("stdio->HTTP"), resume=True)
    assert flow_bound(plan) >= plan.timeout + 30


@pytest.mark.anyio
async def test_a_wait_over_its_beat_is_said(tmp_path: Path) -> None:
    said: list[str] = []
    heard = asyncio.Event()

    def say(line: str) -> None:
        said.append(line)
        heard.set()

    waits = Waits(say, "mcp-remote 0.1.18 stdio->HTTP single-resume", every=0.2)
    async with waits.beating():
        waits.now("waiting for the reference client's flow through the bridge (up to 46 s)")
        await asyncio.wait_for(heard.wait(), 5)
    assert said[0].startswith(
        "mcp-remote 0.1.18 stdio->HTTP single-resume: waiting for the reference client's "
        "flow through the bridge (up to 46 s): "
    )
    assert said[0].endswith(" s so far")


def kept_row(version: str, mark: str) -> BridgeRow:
    made = BridgeRow("mcp-remote", version, "stdio->HTTP", "single")
    made.steps = {key: StepCell(mark if key != "list_changed" else NOT_APPLICABLE) for key in STEPS}
    if mark == NOT_SUPPORTED:
        made = not_supported(BRIDGES["mcp-remote"], version, "stdio->HTTP", "single",
                             "mcp-remote 0.0.22 speaks SSE only")  # fmt: skip
    return made


def test_the_history_says_not_supported_and_when_a_version_supports_it(tmp_path: Path) -> None:
    where = tmp_path / "history.sqlite3"
    for version, mark, when in [
        ("0.0.22", NOT_SUPPORTED, "2026-12-01T10:00:00"),
        ("0.1.18", "passed", "2026-12-01T11:00:00"),
        ("0.0.21", NOT_SUPPORTED, "2026-12-01T12:00:00"),
    ]:
        BRIDGE_HISTORY.record([kept_row(version, mark)], path=where, when=when)
    found = BRIDGE_HISTORY.cells(BRIDGE_HISTORY.read(where))
    table = BRIDGE_HISTORY.to_table(found, where)
    assert "not supported: mcp-remote 0.0.22 speaks SSE only" in table
    changes = [c.text() for c in found[0].changes if c is not None]
    assert changes[0].startswith("0.1.18: now supported: initialize passed, list passed")
    assert "(was not supported)" not in changes[0]
    entry = BRIDGE_HISTORY.read(where)[0]
    assert entry.not_supported == "mcp-remote 0.0.22 speaks SSE only" and not entry.failed


def test_a_stateless_bridges_lost_subscription_is_dropped_not_not_reached() -> None:
    """supergateway without --stateful: the subscribe and the unsubscribe reach the lab
    in different sessions, the lab has no subscriber left when the update comes."""
    from mcp_lab.runners.bridges.verdict import _notified, _Sides

    plan = BridgePlan(registry.get("single"), direction("HTTP->stdio"))
    uri = plan.scenario.read_uri
    outcome = BridgeOutcome(plan, 0)
    outcome.events = [lab_event(protocol.SUBSCRIBE, "s4", uri),
                      lab_event(protocol.UNSUBSCRIBE, "s6", uri)]  # fmt: skip
    cell = _notified(_Sides(outcome, plan.scenario, uri), 1, True)
    assert cell.mark == DROPPED and "keeps no session" in cell.detail
    outcome.events[1] = lab_event(protocol.UNSUBSCRIBE, "s4", uri)
    assert _notified(_Sides(outcome, plan.scenario, uri), 1, True).mark == NOT_REACHED


def test_a_flow_out_of_time_says_how_and_where_it_was() -> None:
    step = ProbeStep("subscribe", 0, {})
    assert _flow_timeout(46, False, [step]) == (
        "the reference client's flow made no step for 46 s (its last step 'subscribe')"
    )
    assert _flow_timeout(46, True, []) == "the reference client's flow took over 184 s (no step)"
