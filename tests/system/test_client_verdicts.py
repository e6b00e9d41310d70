"""The clients runner's verdicts, on agents of our own whose behaviour is known.

``tests/support/fake_agent.py`` is a small agent CLI: an MCP client of the lab (the SDK) and a
client of the scripted model. Run through the same runner as the real CLIs (a fresh
lab, the wire tap, the scored run with its continued turn, the pull run), each of its
behaviours must get the row its behaviour earns: level 7 only for a client that puts
the update into its model's context unasked, never for one that re-reads only when
its model asks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcp_lab.runners import run_folders
from mcp_lab.runners.clients import drivers
from mcp_lab.runners.clients.definition import HTTP, STDIO, ClientDef
from mcp_lab.runners.clients.install import Installed
from mcp_lab.runners.clients.matrix import ClientRow
from mcp_lab.runners.clients.runner import run_client
from mcp_lab.runners.install import CLIENTS_CACHE, cache_dir
from mcp_lab.scenarios import registry
from tests.support.fakes import fake_agent

pytestmark = pytest.mark.anyio
OBSERVE = 3.0
SINGLE = registry.get("single")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fake(behaviour: str, model_url: str | None = None) -> tuple[ClientDef, Installed]:
    spec = fake_agent(behaviour, model=model_url or "{model_url}")
    return spec, Installed(Path(sys.executable), [], drivers.templated(spec), "0.1.0")


def own_runs() -> Path:
    """The runs' folder of the test's own (``_own_cache``)."""
    return run_folders.runs_of("clients", cache_dir(CLIENTS_CACHE))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs' folders go under the test's own directory."""
    monkeypatch.setenv("MCP_LAB_CLIENTS_CACHE", str(tmp_path / "clients"))
    monkeypatch.setenv(run_folders.RUNS_ENV, str(tmp_path / "runs"))


async def row_of(behaviour: str, transport: str = HTTP) -> ClientRow:
    spec, installed = fake(behaviour)
    (row,) = await run_client(
        spec, "0.1.0", [SINGLE], runs=own_runs(), tool="off", observe=OBSERVE, timeout=120,
        installed=installed, transport=transport,
    )  # fmt: skip
    assert row.runner_failed is None, row.notes
    assert row.client_info == "fake-agent/0.1.0"
    assert not any("wire capture disagrees" in n for n in row.notes), row.notes
    return row


def answers(row: ClientRow) -> dict[str, str]:
    return {key: check.answer for key, check in row.checklist.items()}


async def test_an_agent_that_pushes_the_update_into_its_models_context_gets_7_push() -> None:
    row = await row_of("push")
    assert (row.level, row.server_level, row.reflected) == (7, 6, "push"), row.notes
    assert answers(row) == {
        "connected": "yes",
        "listed": "no",
        "read": "yes",
        "subscribed": "yes",
        "notified": "yes",
        "re_read": "yes",
        "reflected": "push",
        "pull": "yes",
    }
    assert row.wire == {
        "connected": True,
        "listed": False,
        "read": True,
        "subscribed": True,
        "notified": True,
        "re_read": True,
    }
    assert any(n.startswith("push: version 2 reached the model unasked") for n in row.notes)
    # Its times are in order: read, subscribe, notified, re-read, then the push.
    times = [row.checklist[k].at_s for k in ("read", "subscribed", "notified", "re_read")]
    assert times == sorted(times), times
    reflected_at = row.checklist["reflected"].at_s
    assert reflected_at is not None and times[-1] is not None and reflected_at >= times[-1]


async def test_an_agent_that_only_tells_its_model_of_the_change_gets_7_notice() -> None:
    row = await row_of("notice")
    assert (row.level, row.server_level, row.reflected) == (7, 5, "notice"), row.notes
    assert "level 7 by notice with the lab's evidence at level 5" in row.notes
    assert answers(row)["re_read"] == "no"


async def test_an_agent_that_reads_only_when_its_model_asks_stays_at_its_server_level() -> None:
    row = await row_of("pull-only")
    assert (row.level, row.server_level, row.reflected, row.pull) == (3, 3, "no", True)
    assert answers(row) == {
        "connected": "yes",
        "listed": "no",
        "read": "yes",
        "subscribed": "no",
        "notified": "no",
        "re_read": "no",
        "reflected": "no",
        "pull": "yes",
    }
    assert "read the resource but never subscribed" in row.notes
    assert any(n.startswith("read on request (pull, never a level): yes") for n in row.notes)
    # The scored run's model read once and never again, whatever the tools offered.
    assert row.model is not None and row.model["read_calls"] == 1
    assert row.model["neutral_tool"] == "todowrite" and row.model["neutral_calls"] >= 2


async def test_a_client_that_subscribes_before_its_model_reads_gets_5_not_6() -> None:
    """The model's one read comes after the client's own subscribe; it must not be
    taken for the client's re-read (the lab's updates wait for that read)."""
    row = await row_of("eager")
    assert (row.level, row.server_level, row.reflected) == (5, 5, "no"), row.notes
    assert answers(row)["re_read"] == "no" and answers(row)["notified"] == "yes"
    assert "notified but never re-read" in row.notes


async def test_a_client_that_subscribes_after_the_update_is_updated_after_its_subscribe() -> None:
    row = await row_of("late-push")
    assert (row.level, row.server_level, row.reflected) == (7, 6, "push"), row.notes
    subscribed, notified = row.checklist["subscribed"].at_s, row.checklist["notified"].at_s
    assert subscribed is not None and notified is not None and notified >= subscribed


async def test_a_client_the_runner_could_not_drive_gets_no_level() -> None:
    """Pointed at a model endpoint where nothing listens, the agent never reaches the
    scripted model: that says nothing of the client, so the row has no level."""
    spec, installed = fake("push", model_url="http://127.0.0.1:9")
    (row,) = await run_client(
        spec, "0.1.0", [SINGLE], runs=own_runs(), tool="off", observe=OBSERVE, timeout=60,
        installed=installed, transport=HTTP,
    )  # fmt: skip
    assert row.level is None and row.to_json()["level_name"] == "runner failed"
    assert row.runner_failed is not None
    assert row.runner_failed.startswith("the CLI never reached the scripted model (exit code 1")
    assert row.notes[0].startswith("runner failed: the CLI never reached the scripted model")


async def test_a_cli_that_never_contacts_the_lab_is_the_runners_failure_not_level_0() -> None:
    spec, installed = fake("offline")
    (row,) = await run_client(
        spec, "0.1.0", [SINGLE], runs=own_runs(), tool="off", observe=OBSERVE, timeout=60,
        installed=installed, transport=HTTP,
    )  # fmt: skip
    assert row.level is None and row.runner_failed is not None, row.notes
    assert row.runner_failed.startswith("the CLI reached the scripted model but never contacted")


async def test_the_runner_plays_the_scenarios_timeline_for_the_client() -> None:
    """In ``repeated`` the runner applies three updates after the model's one read: the
    pushing agent re-reads after each and is told apart from one that never does."""
    repeated = registry.get("repeated")
    rows = {}
    for behaviour in ("push", "pull-only"):
        spec, installed = fake(behaviour)
        (rows[behaviour],) = await run_client(
            spec, "0.1.0", [repeated], runs=own_runs(), tool="off", observe=OBSERVE, timeout=120,
            installed=installed, transport=HTTP,
        )  # fmt: skip
    push, pull = rows["push"], rows["pull-only"]
    assert (push.scenario, push.setup, push.level) == ("repeated", "no tool", 7), push.notes
    assert [(c["key"], c["answer"]) for c in push.checks] == [
        ("notified_each", "3/3"),
        ("re_read_each", "3/3"),
    ]
    assert [(c["key"], c["answer"]) for c in pull.checks] == [
        ("notified_each", "0/3"),
        ("re_read_each", "0/3"),
    ]
    assert "pull" not in push.checklist  # the pull run belongs to single only


async def test_over_stdio_the_same_agent_gets_the_same_row_from_the_stdio_tap() -> None:
    """The agent starts the lab's stdio server itself; the stdio tap sees both
    directions, and the row is the one it gets over http."""
    row = await row_of("push", STDIO)
    assert (row.transport, row.lab_transport, row.level) == (STDIO, "stdio", 7)
    assert answers(row)["subscribed"] == "yes" and answers(row)["notified"] == "yes"
    assert row.wire is not None and row.wire["notified"], row.wire
    folder = Path(row.runs["scored"])
    assert folder.name == "scored" and folder.parent.name == "no-tool-stdio"
    assert "[resources/subscribe]" in (folder / "stdio-server.log").read_text()
