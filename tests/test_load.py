"""Load: a storm of sessions subscribing at once loses nothing.

A real server and updater, a real Redis, the raw Streamable HTTP client of
scripts/rawmcp.py (one POST connection and one GET stream per session). Every
session initializes and opens its GET stream, then all subscribe at the same
moment; each must be accepted, notified, and fully present in the evidence
record (its initialize, its subscribe, its notification in ``mcp:events``), and
after every session has ended no subscriber may be left in Redis.

Before the shared Redis pool waited for a free connection and evidence and
resume writes were batched, a few hundred sessions were enough for refusals
("Lab state store (Redis) unavailable: Too many connections") and lost records.

The issue asks for 5,000 sessions; on the 2 shared cores this lab is developed
on, setting up a session costs the server ~8 ms of CPU, so the default is the
largest N that stays well under a minute there (``MCP_LAB_LOAD_SESSIONS`` sets
another; 5000 passes too, in about two minutes).
"""

from __future__ import annotations

import asyncio
import os
import sys
from urllib.parse import urlsplit

import pytest

from tests.lab import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import bench

SESSIONS = int(os.environ.get("MCP_LAB_LOAD_SESSIONS", "1500"))
# Redis trouble the server logs when it refuses or drops something.
TROUBLE = r"Too many connections|No connection available|event not recorded|event not kept"


@pytest.mark.timeout(60 + SESSIONS // 20)
def test_storm_of_subscribes_refuses_and_loses_nothing(lab, redis_url):
    server, url = lab.server(update_delay_seconds="0")
    lab.updater(update_delay_seconds="0")
    port = urlsplit(url).port
    assert port is not None

    result = asyncio.run(
        bench.storm(port, SESSIONS, redis_url=redis_url, concurrency=200, timeout=60)
    )
    print(result.summary())

    assert not result.setup_failed, result.summary()
    assert not result.refused, result.summary()
    assert result.missing_notifications == 0, result.summary()
    assert result.evidence_missing == 0, result.summary()
    assert result.subscribers_left == 0, result.summary()
    assert server.matching(TROUBLE) == []
