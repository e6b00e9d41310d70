"""Raw GET streams for the tests: SSE events read one at a time with a bound, a session's
GET stream over the network or in memory (an in-process server), and a raw session
subscribed to the status resource."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from mcp_lab.server.resume.eventstore import entry_of
from tests.support.inproc import http_client
from tests.support.lab import STATUS_URI, RawSession

CHANNEL = "mcp:resources:updated"


@dataclass
class SseEvent:
    id: str | None
    retry: int | None
    data: str

    @property
    def message(self) -> dict[str, Any]:
        return json.loads(self.data)


class SseStream:
    """The events of one open GET stream, read one at a time with a bound."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self, timeout: float = 10.0) -> SseEvent:
        fields: dict[str, str] = {}
        with anyio.fail_after(timeout):
            async for line in self._lines:
                if not line:
                    if fields:
                        retry = fields.get("retry")
                        return SseEvent(fields.get("id"), int(retry) if retry else None,
                                        fields.get("data", ""))  # fmt: skip
                    continue
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        raise AssertionError("stream ended")

    async def next_message(self, timeout: float = 10.0) -> SseEvent:
        """The next event that carries a message (priming events skipped)."""
        with anyio.fail_after(timeout):
            while not (event := await self.next()).data:
                pass
        return event


def get_headers(session: str, last_event_id: str | None = None) -> dict[str, str]:
    """Headers of a GET stream request for ``session``, resuming after ``last_event_id``."""
    headers = {
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
    }
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    return headers


@asynccontextmanager
async def get_stream(
    url: str, session: str, last_event_id: str | None = None
) -> AsyncIterator[SseStream]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        async with http.stream("GET", url, headers=get_headers(session, last_event_id)) as response:
            assert response.status_code == 200, response.status_code
            yield SseStream(response)


async def subscribed_raw(url: str, name: str) -> RawSession:
    raw = RawSession(url, name)
    await raw.initialize()
    await raw.request("resources/subscribe", {"uri": STATUS_URI})
    assert raw.session_id
    return raw


def assert_updated(event: SseEvent) -> None:
    assert event.id and entry_of(event.id) is not None
    assert event.message["method"] == "notifications/resources/updated"
    assert event.message["params"] == {"uri": STATUS_URI}


@asynccontextmanager
async def get_stream_in_process(
    url: str, session: str, last_event_id: str | None = None
) -> AsyncIterator[SseStream]:
    http = http_client(url)
    assert http is not None, f"no in-process server at {url}"
    async with http, http.stream("GET", url, headers=get_headers(session, last_event_id)) as got:
        assert got.status_code == 200, got.status_code
        yield SseStream(got)
