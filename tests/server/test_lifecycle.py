"""Nothing outlives its welcome: the session cap, idle expiry, and the subscribers
a killed replica leaves behind. Real server processes, real Redis, raw HTTP clients."""

from __future__ import annotations

import pytest

from mcp_lab.contract import Event
from mcp_lab.evidence.session_scoring import score_session

pytestmark = pytest.mark.anyio


def test_a_session_the_server_closed_for_idleness_is_noted() -> None:
    def event(method: str, direction: str = "in", reason: str | None = None) -> Event:
        return Event(1, "s", "c", "1", "2025-11-25", "streamable-http", direction, method,
                     reason=reason)  # fmt: skip

    idle = score_session([event("initialize"), event("session/end", "out", "idle")])
    assert any("never closed its session" in note for note in idle.notes)
    closed = score_session([event("initialize")])
    assert not any("never closed" in note for note in closed.notes)
