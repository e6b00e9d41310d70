"""Scenarios as data: each one served, played by the SDK reference client (``mcp-lab
probe --scenario``) and scored by ``mcp-lab report``, against real lab processes;
clients of our own that fall short are told apart.
"""

from __future__ import annotations

import json
import subprocess
import tempfile

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost

from mcp_lab.runners.probe import Probe
from mcp_lab.scenarios import registry
from tests.support.lab import ROOT, amcp_lab, lab_env, mcp_lab, stdio_server

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
    assert {"graceful-close", "partial-ack", "cached"} <= set(names)
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


def test_the_reference_client_stops_at_a_graceful_close_and_listens_no_more(lab, redis_url) -> None:
    url = start(lab, "graceful-close")
    code, steps = probe(url, "graceful-close", "--protocol", "modern")
    assert code == 0, steps
    names = [s["step"] for s in steps]
    assert names[-4:] == ["listen_completed", "stayed_closed", "unsubscribed", "summary"], names
    assert steps[-2]["method"] == "subscriptions/listen stream ended by the server"
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert probed["level"] == 6
    assert checks_of(probed) == {"stream_ended": "yes", "relistened": "0"}


def test_a_2025_client_has_no_listen_stream_to_close_in_graceful_close(lab, redis_url) -> None:
    url = start(lab, "graceful-close")
    code, steps = probe(url, "graceful-close", "--protocol", "legacy")
    assert code == 0, steps
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert checks_of(probed) == {"relistened": "not supported (resources/subscribe)"}


@pytest.mark.parametrize(
    ("scenario", "last_steps", "answers"),
    [
        (
            "graceful-close",
            ["listen_completed", "stayed_closed", "unsubscribed", "summary"],
            {"stream_ended": "yes", "relistened": "0"},
        ),
        (
            "partial-ack",
            ["notification_received", "final_content", "unsubscribed", "summary"],
            {"unwatched_read": "yes"},
        ),
        (
            "cached",
            ["notification_received", "final_content", "unsubscribed", "summary"],
            {"wire_re_read": "yes"},
        ),
        (  # the server process exits; the probe starts it again and listens again
            "dropped-stream",
            ["notification_received", "final_content", "unsubscribed", "summary"],
            {"stream_dropped": "yes", "relistened": "yes", "kept_update": "yes"},
        ),
    ],
)
async def test_the_reference_client_plays_the_2026_scenarios_over_stdio(
    lab, redis_url, scenario, last_steps, answers
) -> None:
    await lab.aupdater(update_delay_seconds=DELAY, scenario=scenario)
    env = lab_env(redis_url, update_delay_seconds=DELAY, scenario=scenario)
    played = registry.get(scenario)
    steps: list[dict] = []
    with tempfile.TemporaryFile("w+") as errlog:
        probe_ = Probe(
            "", played.read_uri, 20.0, "modern", None, "stdio", played,
            stdio=stdio_server(env), errlog=errlog,
            on_step=lambda step, **fields: steps.append({"step": step, **fields}),
            say=lambda text: None,
        )  # fmt: skip
        code = await probe_.run()
        errlog.seek(0)
        assert code == 0, f"{steps}\nthe stdio servers said:\n{errlog.read()[-4000:]}"
    names = [s["step"] for s in steps]
    assert names[-4:] == last_steps, steps
    if scenario == "dropped-stream":
        assert names.index("listen_dropped") < names.index("listened_again"), names
    probed = client_of(await areport(redis_url), "mcp-lab-probe")
    assert probed["sessions"][0]["transport"] == "stdio"
    assert probed["level"] == 6
    assert checks_of(probed) == answers


async def test_a_client_that_listens_again_after_each_graceful_close_is_counted(
    lab, redis_url
) -> None:
    _, url = await lab.aserver(update_delay_seconds=DELAY, scenario="graceful-close")
    await lab.aupdater(update_delay_seconds=DELAY, scenario="graceful-close")
    info = mcp_types.Implementation(name="relistener", version="1")
    uri = "test://review/status"
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), client_info=info) as client,
    ):
        await client.read_resource(uri)
        with anyio.fail_after(30):
            for _ in range(3):  # each stream ends with its final result; it listens again
                async with client.listen(resource_subscriptions=[uri]) as subscription:
                    async for _change in subscription:
                        await client.read_resource(uri)
    relistener = client_of(await areport(redis_url), "relistener")
    assert checks_of(relistener) == {"stream_ended": "yes", "relistened": "2"}
    (relistened,) = [c for c in relistener["checks"] if c["key"] == "relistened"]
    assert relistened["ok"] is False


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
def test_the_reference_client_reads_what_the_partial_ack_left_out(lab, redis_url, protocol) -> None:
    url = start(lab, "partial-ack")
    code, steps = probe(url, "partial-ack", "--protocol", protocol)
    assert code == 0, steps
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert probed["level"] == 6  # the watched one still gets its update
    if protocol == "legacy":
        assert checks_of(probed) == {"unwatched_read": "not supported (resources/subscribe)"}
        return
    subscribed = next(s for s in steps if s["step"] == "subscribed")
    assert subscribed["honored"] == ["test://review/status"], subscribed
    unwatched = next(s for s in steps if s["step"] == "unwatched_read")
    assert unwatched["uri"] == "test://review/notes" and "reviewer left" in unwatched["text"]
    assert checks_of(probed) == {"unwatched_read": "yes"}


async def test_a_client_that_ignores_the_partial_ack_never_reads_the_notes(lab, redis_url) -> None:
    _, url = await lab.aserver(update_delay_seconds=DELAY, scenario="partial-ack")
    await lab.aupdater(update_delay_seconds=DELAY, scenario="partial-ack")
    info = mcp_types.Implementation(name="trusting", version="1")
    uri, notes = "test://review/status", "test://review/notes"
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), client_info=info) as client,
        client.listen(resource_subscriptions=[uri, notes]) as subscription,
    ):
        assert subscription.honored.resource_subscriptions == [uri]
        await client.read_resource(uri)
        with anyio.fail_after(20):
            async for _change in subscription:
                await client.read_resource(uri)
                break
    trusting = client_of(await areport(redis_url), "trusting")
    assert checks_of(trusting) == {"unwatched_read": "no"}


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
def test_the_reference_client_with_its_cache_on_reads_version_2_from_the_wire(
    lab, redis_url, protocol
) -> None:
    url = start(lab, "cached")
    code, steps = probe(url, "cached", "--protocol", protocol)
    assert code == 0, steps
    final = next(s for s in steps if s["step"] == "final_content")
    assert final["changed"] is True and "version: 2" in final["text"], final
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert probed["level"] == 6
    assert checks_of(probed) == {"wire_re_read": "yes"}


async def test_a_cached_read_never_reaches_the_lab_and_a_client_that_stops_there_is_noted(
    lab, redis_url
) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY, scenario="cached")
    await lab.aupdater(update_delay_seconds=DELAY, scenario="cached")
    uri = "test://review/status"
    for name in ("re-reader", "cache-only"):
        info = mcp_types.Implementation(name=name, version="1")
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(url, http_client=http), client_info=info) as client,
        ):
            first = await client.read_resource(uri)
            assert first.ttl_ms == 60_000, first  # the scenario's hint, honoured by the SDK
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                # Before the update: the SDK's cache answers, the lab sees no read.
                again = await client.read_resource(uri)
                assert again.contents == first.contents
                with anyio.fail_after(20):
                    async for _change in subscription:
                        if name == "re-reader":
                            final = await client.read_resource(uri)
                            assert "version: 2" in getattr(final.contents[0], "text", "")
                        break
    # The lab saw each client's first read and the re-reader's after the update, never
    # the read before the update (served from the SDK's cache).
    read_by = {
        name: server.matching(rf"\[resources/read\] uri={uri} version=.*client={name}/")
        for name in ("re-reader", "cache-only")
    }
    assert [len(read_by["re-reader"]), len(read_by["cache-only"])] == [2, 1], read_by
    data = await areport(redis_url)
    assert checks_of(client_of(data, "re-reader")) == {"wire_re_read": "yes"}
    assert checks_of(client_of(data, "cache-only")) == {
        "wire_re_read": "no: a re-read may have been served from its cache (ttlMs 60000)"
    }


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
def test_the_reference_client_listens_again_after_a_dropped_stream(
    lab, redis_url, protocol
) -> None:
    url = start(lab, "dropped-stream")
    code, steps = probe(url, "dropped-stream", "--protocol", protocol)
    assert code == 0, steps
    probed = client_of(report(redis_url), "mcp-lab-probe")
    assert probed["level"] == 6
    if protocol == "legacy":
        assert checks_of(probed) == {"relistened": "not supported (resources/subscribe)"}
        return
    names = [s["step"] for s in steps]
    assert (
        names.index("subscribed")
        < names.index("listen_dropped")
        < names.index("listened_again")
        < names.index("notification_received")
    ), names
    dropped = next(s for s in steps if s["step"] == "listen_dropped")
    assert "ended without the server's graceful close" in dropped["error"], dropped
    assert checks_of(probed) == {"stream_dropped": "yes", "relistened": "yes", "kept_update": "yes"}


async def test_a_client_back_after_the_update_is_told_of_it_and_one_that_stays_away_is_not(
    lab, redis_url
) -> None:
    """The lab keeps the update for a client that listens again: one that comes back
    only after the update was applied is notified on its new stream at once; one that
    never listens again is never notified (and its row says so)."""
    server, url = await lab.aserver(update_delay_seconds=DELAY, scenario="dropped-stream")
    updater = await lab.aupdater(update_delay_seconds=DELAY, scenario="dropped-stream")
    uri = "test://review/status"
    for name in ("late-comer", "gone"):
        info = mcp_types.Implementation(name=name, version="1")
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(url, http_client=http), client_info=info) as client,
        ):
            await client.read_resource(uri)
            with pytest.raises(SubscriptionLost), anyio.fail_after(20):
                async with client.listen(resource_subscriptions=[uri]) as subscription:
                    async for _change in subscription:
                        pytest.fail("an update on the stream the lab drops before it")
            # The update is applied while the client has no stream.
            await updater.await_line(
                rf"\[resource/update\] uri={uri} version=2 scope=modern:{name}/1 ", timeout=20
            )
            if name == "gone":
                continue
            with anyio.fail_after(20):
                async with client.listen(resource_subscriptions=[uri]) as subscription:
                    async for _change in subscription:  # at once: the kept update
                        final = await client.read_resource(uri)
                        assert "version: 2" in getattr(final.contents[0], "text", "")
                        break
    kept = rf"\[subscriptions/listen\] uri={uri} .*client=late-comer/1 kept update version=2"
    await server.await_line(kept)
    data = await areport(redis_url)
    assert checks_of(client_of(data, "late-comer")) == {
        "stream_dropped": "yes",
        "relistened": "yes",
        "kept_update": "yes",
    }
    gone = client_of(data, "gone")
    assert checks_of(gone) == {"stream_dropped": "yes", "relistened": "no"}
    assert gone["level"] < 5, gone  # never notified
