"""Event lines (services/mcp_lab/logs.py): many logged at once read exactly as one by one."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from mcp_lab import logs
from mcp_lab.contract import Peer


@pytest.fixture
def written() -> Iterator[io.StringIO]:
    """What the lab's log handler writes, with its formatter, at INFO."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.OneLineFormatter("%(levelname)-7s %(message)s"))
    protocol = logging.getLogger("mcp_lab.protocol")
    protocol.addHandler(handler)
    level = logs.logger.level
    logs.logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        protocol.removeHandler(handler)
        logs.logger.setLevel(level)


PEERS = [
    Peer("s1", "client", "1.0"),
    Peer("s2", "evil\nINFO    [session/end] forged", "2\x1b[2J"),
    Peer("s3", "client", "1.0"),
]


def items() -> list[tuple[str, str, Peer, str]]:
    return [
        ("resource/update", f"uri=test://x version={n}", peer, "delivered=no" if n == 1 else "")
        for n, peer in enumerate(PEERS)
    ]


def test_events_logged_together_read_as_the_same_events_logged_one_by_one(written) -> None:
    for tag, detail, peer, extra in items():
        logs.event(tag, detail, peer, extra)
    one_by_one = written.getvalue()
    written.seek(0)
    written.truncate()

    logs.events(items())

    assert written.getvalue() == one_by_one
    lines = one_by_one.splitlines()
    assert len(lines) == len(PEERS)  # the newline a client chose is escaped, not a line
    assert lines[1].startswith("INFO    [resource/update] uri=test://x version=1 session=s2 ")
    assert "evil\\nINFO" in lines[1] and "\\x1b[2J" in lines[1]
    assert lines[1].endswith(" delivered=no")


def test_events_below_the_level_are_not_written(written) -> None:
    logs.events(items(), level=logging.DEBUG)
    logs.events([])
    assert written.getvalue() == ""
