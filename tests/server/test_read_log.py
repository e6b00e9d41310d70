"""The ``[resources/read]`` line: at INFO for a session's first read of a version, at
DEBUG for a repeat of it; the evidence keeps a record of every read."""

from __future__ import annotations

import pytest

from tests.support.inproc import api_report, client_entry
from tests.support.lab import STATUS_URI, connect, version_of

pytestmark = pytest.mark.anyio

DELAY = "0.3"
READ_LINE = r"\[resources/read\] uri=test://review/status version=(\d) .*client=repeat-reader/"


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
async def test_repeated_reads_log_once_at_info_and_keep_every_record(inproc, level) -> None:
    server, url = await inproc.server(update_delay_seconds=DELAY, log_level=level)
    await inproc.updater(update_delay_seconds=DELAY)
    async with connect(url, "repeat-reader") as client:
        for _ in range(3):
            assert version_of(await client.read_text()) == 1
        await client.session.subscribe_resource(STATUS_URI)
        assert await client.wait_updated(1, timeout=10.0) == [STATUS_URI]
        for _ in range(2):
            assert version_of(await client.read_text()) == 2
    await server.await_line(r"\[session/end\] .*client=repeat-reader/")

    logged = server.matching(READ_LINE)
    versions = [line.split("version=")[1][0] for line in logged]
    assert versions == (["1", "2"] if level == "INFO" else ["1", "1", "1", "2", "2"])

    entry = client_entry(await api_report(url), "repeat-reader")
    events = entry["sessions"][0]["events"]
    assert [e.get("version") for e in events if e["method"] == "resources/read"] == [1] * 3 + [
        2
    ] * 2
