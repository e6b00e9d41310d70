"""The front door's requests in flight (services/mcp_lab/server/inflight.py): how many are
handled at once, and what never waits. The app behind it is a plain ASGI callable
that holds each request until the test lets it go."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from mcp_lab import protocol
from mcp_lab.server.inflight import InFlightIds

pytestmark = pytest.mark.anyio


class HeldApp:
    """An ASGI app that records each request's body and answers once released."""

    def __init__(self) -> None:
        self.entered: list[bytes] = []
        self.release = asyncio.Event()
        self.changed = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        message = await receive()
        self.entered.append(message["body"])
        self.changed.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.entered) < count:
                self.changed.clear()
                await self.changed.wait()


def post(gate: InFlightIds, app: HeldApp, session: bytes, body: dict) -> asyncio.Task[None]:
    raw = json.dumps(body).encode()

    async def receive() -> dict:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(_: dict) -> None:
        return None

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    return asyncio.ensure_future(gate.serve(app, scope, receive, send, session, raw))


def request(n: int) -> dict:
    return {"jsonrpc": "2.0", "id": n, "method": "resources/read"}


async def test_requests_past_the_limit_wait_their_turn_in_order(caplog) -> None:
    gate, app = InFlightIds(at_once=2), HeldApp()
    caplog.set_level(logging.INFO, "mcp_lab.server")
    tasks = [post(gate, app, f"s{n}".encode(), request(n)) for n in range(5)]
    await app.until(2)
    async with asyncio.timeout(5):  # the other three reach their wait (no I/O: loop rounds)
        while gate.waiting < 3:
            await asyncio.sleep(0)
    assert len(app.entered) == 2
    assert "request(s) wait for their turn: 2 are handled at once" in caplog.text
    app.release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
    assert [json.loads(b)["id"] for b in app.entered] == [0, 1, 2, 3, 4]
    assert gate.waiting == 0


async def test_notifications_and_client_responses_never_wait() -> None:
    """With every place taken, a notification and a client's answer to a server's
    request still go through: a request may be waiting for just that answer."""
    gate, app = InFlightIds(at_once=1), HeldApp()
    held = post(gate, app, b"a", request(1))
    await app.until(1)
    note = post(gate, app, b"a", protocol.initialized_notification())
    answer = post(gate, app, b"a", {"jsonrpc": "2.0", "id": "srv-1", "result": {}})
    await app.until(3)
    assert gate.waiting == 0
    app.release.set()
    await asyncio.wait_for(asyncio.gather(held, note, answer), timeout=5)


async def test_without_a_limit_nothing_waits() -> None:
    gate, app = InFlightIds(), HeldApp()
    tasks = [post(gate, app, b"s", request(n)) for n in range(50)]
    await app.until(50)
    app.release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
