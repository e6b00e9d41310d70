"""A scenario added in a test alone is served, probed and scored: no other file knows it.

The scenario below (a build status of its own, updated twice in quick succession,
with a checkpoint that counts the notifications) is registered here only. The lab's
server and updater play it in this event loop (tests/support/inproc.py), the probe plays its
ideal client, and the report builder scores it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcp_lab import state
from mcp_lab.catalog import Catalog, ResourceSpec
from mcp_lab.contract import Event
from mcp_lab.evidence import build
from mcp_lab.runners.probe import Probe
from mcp_lab.scenarios import checks, registry
from mcp_lab.scenarios.scenario import Action, Check, Scenario
from tests.support.inproc import http_client

BUILD = ResourceSpec(
    uri="test://ci/build",
    name="build",
    description="A build of the test's own.",
    mime_type="text/plain",
    initial_text="status: {status}\nversion: {version}",
    updated_text="status: {status}\nversion: {version}",
)


def _count(events: list[Event], uri: str) -> list[Check]:
    notes = checks.updates_after_subscribe(events, uri)
    return [Check("notified_twice", "notified twice", checks.fraction(len(notes), 2))]


TWICE = Scenario(
    name="twice-in-a-test",
    summary="a build updated twice, half a second apart",
    catalog=Catalog([BUILD]),
    watched=BUILD.uri,
    timeline=(Action(), Action(after=0.5)),
    checks=_count,
)


@pytest.fixture
def twice() -> Iterator[Scenario]:
    registry.register(TWICE)
    try:
        yield TWICE
    finally:
        registry.forget(TWICE.name)


async def test_a_scenario_registered_in_a_test_is_served_probed_and_scored(
    inproc, redis_url, twice
) -> None:
    _, url = await inproc.server(update_delay_seconds="0.3", scenario=twice.name)
    await inproc.updater(update_delay_seconds="0.3", scenario=twice.name)
    probe = Probe(url, BUILD.uri, 15.0, "legacy", None, "http", twice)

    def in_memory(*args: object, **kwargs: object) -> object:
        return http_client(url)

    probe._http_client = in_memory  # type: ignore[method-assign]  # the server is in memory
    assert await probe.run() == 0
    redis = state.connect(redis_url)
    try:
        made = await build.build(redis)
    finally:
        await redis.aclose()
    assert made.scenario is twice  # the lab said which one it plays
    (probed,) = [c for c in made.clients if c.client == "mcp-lab-probe"]
    assert probed.level == 6 and probed.best.uri == BUILD.uri
    assert [(c.key, c.answer) for c in probed.checks] == [("notified_twice", "2/2")]
