"""A known flow, scored by the lab's own scoring, for the picture tests: a client that
lists, reads, subscribes, is notified on its GET stream, loses a second notification
after closing the stream, and reads again; beside it a client with a hostile name."""

from __future__ import annotations

from mcp_lab.contract import Event
from mcp_lab.evidence import scoring
from mcp_lab.evidence.build import Report
from mcp_lab.scenarios import registry

URI = "test://review/status"
START_MS = 1_796_032_824_000
SESSION = "4e0c7f1a2b3d4c5e6f708192a3b4c5d6"
HOSTILE_NAME = '<img src=x onerror="window.__xss=1">;#--x'
HOSTILE_VERSION = "</svg><script>window.__xss=2</script>"


def _event(ms: int, method: str, direction: str = "in", **fields: object) -> Event:
    who = fields.pop("who", ("cli", "1.0", SESSION))
    assert isinstance(who, tuple)
    name, version, session = who
    return Event(
        ts_ms=START_MS + ms,
        session=session,
        client=name,
        client_version=version,
        protocol="2025-11-25",
        transport="streamable-http",
        direction=direction,
        method=method,
        **fields,  # type: ignore[arg-type]
    )


def known_flow() -> list[Event]:
    hostile = (HOSTILE_NAME, HOSTILE_VERSION, "deadbeef")
    return [
        _event(0, "initialize"),
        _event(100, "resources/list"),
        _event(150, "stream/open"),
        _event(200, "resources/read", uri=URI, version=1),
        _event(300, "resources/subscribe", uri=URI),
        _event(5300, "notifications/resources/updated", "out", uri=URI, version=2, delivered=True),
        _event(5400, "stream/close"),
        _event(8000, "notifications/resources/updated", "out", uri=URI, version=3, delivered=False),
        _event(8420, "resources/read", uri=URI, version=3),
        _event(50, "initialize", who=hostile),
        _event(60, HOSTILE_VERSION, who=hostile, error=-32601),
    ]


def known_report() -> Report:
    single = registry.get("single")
    clients = scoring.score_clients(known_flow(), [], single)
    return Report(f"{START_MS - 6000}-0", None, single, clients, 0, START_MS + 10_000)
