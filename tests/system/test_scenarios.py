"""Scenarios as data: each one served, played by the SDK reference client (``mcp-lab
probe --scenario``) and scored by ``mcp-lab report``, against real lab processes;
clients of our own that fall short are told apart.
"""

from __future__ import annotations

import json
import subprocess

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_lab.scenarios import registry
from tests.support.lab import ROOT, amcp_lab, lab_env, mcp_lab

DELAY = "0.5"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def start(lab, scenario: str) -> str:
    """A lab playing ``scenario``: server and updater processes; the MCP URL."""
    _, url = lab.server(update_delay_seconds=DELAY, scenario=scenario)
    lab.updater(update_delay_seconds=DELAY, scenario=scenario)
    return url


def probe(url: str, scenario: str, *args: str) -> tuple[int, list[dict]]:
    result = mcp_lab(lab_env(""), "probe", "--url", url, "--scenario", scenario, "--timeout",
                     "20", *args)  # fmt: skip
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert steps and steps[-1]["step"] == "summary", result.stdout + result.stderr
    return result.returncode, steps


def report(redis_url: str, *args: str) -> dict:
    return parsed(mcp_lab(lab_env(redis_url), "report", "--format", "json", *args))


async def areport(redis_url: str) -> dict:
    return parsed(await amcp_lab(lab_env(redis_url), "report", "--format", "json"))


def parsed(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def client_of(data: dict, name: str) -> dict:
    return next(c for c in data["clients"] if c["client"] == name)


def checks_of(entry: dict) -> dict[str, str]:
    return {c["key"]: c["answer"] for c in entry["checks"]}


def test_every_scenario_is_listed_with_one_line() -> None:
    result = mcp_lab(lab_env(""), "scenarios")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    assert names[0] == "single" and "(default)" in lines[0]
    assert {"repeated", "unsubscribe", "list-changed", "template"} <= set(names)
    assert names == registry.names()


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
def test_the_reference_client_keeps_up_with_every_update_of_repeated(
    lab, redis_url, protocol
) -> None:
    url = start(lab, "repeated")
    code, steps = probe(url, "repeated", "--protocol", protocol)
    assert code == 0, steps
    finals = [s["text"] for s in steps if s["step"] == "final_content"]
    assert [f.split("version: ")[1][0] for f in finals] == ["2", "3", "4"], finals
    data = report(redis_url)
    assert data["scenario"]["name"] == "repeated"
    probed = client_of(data, "mcp-lab-probe")
    assert probed["level"] == 6
    assert checks_of(probed) == {"notified_each": "3/3", "re_read_each": "3/3"}


async def test_a_client_that_reads_again_once_scores_1_of_3(lab, redis_url) -> None:
    _, url = await lab.aserver(update_delay_seconds=DELAY, scenario="repeated")
    await lab.aupdater(update_delay_seconds=DELAY, scenario="repeated")
    notified = anyio.Event()
    seen = 0

    async def on_message(message: object) -> None:
        nonlocal seen
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            seen += 1
            if seen == 3:
                notified.set()

    info = mcp_types.Implementation(name="reads-once", version="1")
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            client_info=info,
            message_handler=on_message,
        ) as client,  # fmt: skip
    ):
        uri = "test://review/status"
        await client.read_resource(uri)
        await client.subscribe_resource(uri)
        with anyio.fail_after(20):
            while seen < 1:
                await anyio.sleep(0.05)
            await client.read_resource(uri)  # once, after the first update only
            await notified.wait()
    once = client_of(await areport(redis_url), "reads-once")
    assert checks_of(once) == {"notified_each": "3/3", "re_read_each": "1/3"}
    assert once["level"] == 6


@pytest.mark.parametrize(
    ("protocol", "how"),
    [("legacy", "resources/unsubscribe"), ("modern", "closed its listen stream")],
)
def test_the_reference_client_unsubscribes_and_the_lab_then_stays_quiet(
    lab, redis_url, protocol, how
) -> None:
    url = start(lab, "unsubscribe")
    code, steps = probe(url, "unsubscribe", "--protocol", protocol)
    # The probe watched the second update's due time pass without a notification.
    assert code == 0, steps
    assert [
        s["step"] for s in steps if s["step"] in ("unsubscribed", "quiet_after_unsubscribe")
    ] == [
        "unsubscribed",
        "quiet_after_unsubscribe",
    ]
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert checks_of(probed) == {"unsubscribed": f"yes ({how})", "quiet_after": "0"}


async def test_a_client_that_deletes_its_session_counts_as_done_and_one_that_stays_does_not(
    lab, redis_url
) -> None:
    _, url = await lab.aserver(update_delay_seconds=DELAY, scenario="unsubscribe")
    await lab.aupdater(update_delay_seconds=DELAY, scenario="unsubscribe")
    uri = "test://review/status"
    for name in ("deleter", "stayer"):
        info = mcp_types.Implementation(name=name, version="1")
        got = anyio.Event()

        async def on_message(message: object, got: anyio.Event = got) -> None:
            if isinstance(message, mcp_types.ResourceUpdatedNotification):
                got.set()

        # The SDK's client sends DELETE when it closes (terminate_on_close).
        transport = streamable_http_client(url, terminate_on_close=name == "deleter")
        async with Client(transport, mode="legacy", client_info=info,
                          message_handler=on_message) as client:  # fmt: skip
            await client.read_resource(uri)
            await client.subscribe_resource(uri)
            with anyio.fail_after(20):
                await got.wait()
            await client.read_resource(uri)
    data = await areport(redis_url)
    assert checks_of(client_of(data, "deleter")) == {
        "unsubscribed": "yes (DELETE of its session)",
        "quiet_after": "0",
    }
    assert checks_of(client_of(data, "stayer")) == {"unsubscribed": "no"}


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
def test_the_reference_client_lists_again_and_reads_the_new_resource(
    lab, redis_url, protocol
) -> None:
    url = start(lab, "list-changed")
    code, steps = probe(url, "list-changed", "--protocol", protocol)
    assert code == 0, steps
    new = next(s for s in steps if s["step"] == "new_resource")
    assert new["uri"] == "test://review/notes" and "reviewer left" in new["text"]
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert checks_of(probed) == {"list_changed": "yes", "relisted": "yes", "read_new": "yes"}


async def test_a_hidden_resource_is_neither_listed_nor_readable_before_it_is_added(
    lab, redis_url
) -> None:
    _, url = await lab.aserver(update_delay_seconds="30", scenario="list-changed")
    info = mcp_types.Implementation(name="early", version="1")
    async with Client(streamable_http_client(url), mode="legacy", client_info=info) as client:
        listed = await client.list_resources()
        assert [str(r.uri) for r in listed.resources] == ["test://review/status"]
        with pytest.raises(Exception, match="Resource not found"):
            await client.read_resource("test://review/notes")


def test_the_reference_client_finds_the_template_and_subscribes_to_one_of_its_resources(
    lab, redis_url
) -> None:
    url = start(lab, "template")
    code, steps = probe(url, "template", "--protocol", "legacy")
    assert code == 0, steps
    found = next(s for s in steps if s["step"] == "resource")
    assert found == {"step": "resource", "uri": "test://review/42", "found": True,
                     "template": "test://review/{id}"}  # fmt: skip
    assert "review 42" in next(s for s in steps if s["step"] == "initial_content")["text"]
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert probed["level"] == 6
    assert probed["sessions"][0]["uri"] == "test://review/42"
    assert checks_of(probed) == {
        "templates_listed": "yes",
        "concrete_subscribed": "test://review/42",
    }


def test_single_is_the_default_and_keeps_the_seeds_levels(lab, redis_url) -> None:
    _, url = lab.server(update_delay_seconds=DELAY)
    lab.updater(update_delay_seconds=DELAY)
    code, steps = probe(url, "single")
    assert code == 0, steps
    data = report(redis_url)
    assert data["scenario"]["name"] == "single"
    probed = client_of(data, "mcp-lab-probe")
    assert probed["level"] == 6 and probed["checks"] == []


def test_an_unknown_scenario_is_a_clear_error() -> None:
    result = mcp_lab(lab_env(""), "probe", "--url", "http://127.0.0.1:9/mcp", "--scenario", "x")
    assert result.returncode == 2 and "unknown scenario 'x'" in result.stderr, result.stderr
    assert (ROOT / "services" / "mcp_lab" / "scenarios" / "single.py").exists()
