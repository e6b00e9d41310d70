"""Era fallback on one stdio connection (2026-07-28, ``basic/versioning.mdx``, "Compatibility
Matrix"; ``basic/transports/stdio.mdx``, "Backward Compatibility").

A dual-era client probes with ``server/discover``; if no answer comes within its timeout it
falls back to ``initialize`` on the same connection (the Vercel AI SDK waits 1 s). The lab
is a dual-era server, so that ``initialize`` must be answered: "An ``initialize`` request
selects legacy semantics, scoped to the stdio process (stdio)", and "A dual-era server
**MAY** serve both eras concurrently on the same endpoint or process". Only a server that
supports *only* modern versions rejects ``initialize`` ("Legacy | Modern: Fails").
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from mcp_lab import protocol
from tests.support.lab import ROOT, STATUS_URI, lab_env

pytestmark = pytest.mark.anyio

BOUND = 30.0
MODERN = "2026-07-28"


def discover(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "server/discover",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "dual-era", "version": "1.0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }


class StdioLab:
    """The lab's stdio server as a process: one JSON-RPC message a line each way."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._lines = TextReceiveStream(process.stdout)
        self._buffer = ""
        self.replies: dict[Any, dict[str, Any]] = {}

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send((json.dumps(message) + "\n").encode())

    async def reply(self, request_id: Any) -> dict[str, Any]:
        """The response to ``request_id`` (others read meanwhile are kept)."""
        with anyio.fail_after(BOUND):
            while request_id not in self.replies:
                while "\n" not in self._buffer:
                    self._buffer += await self._lines.receive()
                line, self._buffer = self._buffer.split("\n", 1)
                message = json.loads(line)
                if "id" in message and "method" not in message:
                    self.replies[message["id"]] = message
        return self.replies[request_id]


async def start(redis_url: str) -> StdioLab:
    process = await anyio.open_process(
        [sys.executable, "-m", "mcp_lab", "server", "--transport", "stdio"],
        cwd=ROOT,
        env=lab_env(redis_url),
    )
    return StdioLab(process)


async def stop(lab: StdioLab) -> None:
    assert lab.process.stdin is not None
    await lab.process.stdin.aclose()  # end of input: the server exits
    with anyio.move_on_after(BOUND) as waited:
        await lab.process.wait()
    if waited.cancelled_caught:
        lab.process.kill()
        await lab.process.wait()


async def legacy_session_works(lab: StdioLab, initialize_id: int) -> None:
    answer = await lab.reply(initialize_id)
    assert "error" not in answer, answer
    assert answer["result"]["protocolVersion"] == protocol.HANDSHAKE_VERSION
    await lab.send(protocol.initialized_notification())
    await lab.send({"jsonrpc": "2.0", "id": initialize_id + 1, "method": "resources/list"})
    listed = await lab.reply(initialize_id + 1)
    assert [r["uri"] for r in listed["result"]["resources"]] == [STATUS_URI]


async def test_initialize_after_an_answered_discover_on_the_same_stdio_connection(
    redis_url: str,
) -> None:
    """versioning.mdx, "Backward Compatibility with Initialization-Based Versions": "A
    dual-era **server** selects its behavior from how the client opens: [...] An
    `initialize` request selects legacy semantics, scoped to the stdio process (stdio)
    [...]. A dual-era server **MAY** serve both eras concurrently on the same endpoint or
    process." The lab answers the probe, then the handshake, on one connection."""
    lab = await start(redis_url)
    try:
        await lab.send(discover(1))
        found = await lab.reply(1)
        assert MODERN in found["result"]["supportedVersions"]
        # server/utilities/caching.mdx, "Cacheable Results": `server/discover` carries hints.
        assert found["result"]["ttlMs"] == 0 and found["result"]["cacheScope"] == "private"
        await lab.send(protocol.initialize_request("dual-era", "1.0", request_id=2))
        await legacy_session_works(lab, 2)
    finally:
        await stop(lab)


async def test_initialize_sent_before_the_discover_answer_as_after_a_probe_timeout(
    redis_url: str,
) -> None:
    """stdio.mdx, "Backward Compatibility": "The server returns any other error, or does
    not respond within a reasonable timeout: the server is legacy. Fall back to the
    `initialize` handshake." and versioning.mdx, "Compatibility Matrix", Dual-era client:
    "the probe returns a non-modern error or times out, and the client falls back to
    `initialize`." A client whose timeout (1 s for the Vercel AI SDK) ran out before the
    lab's answer sends ``initialize`` on the same connection; it must be served."""
    lab = await start(redis_url)
    try:
        await lab.send(discover(1))
        await lab.send(protocol.initialize_request("dual-era", "1.0", request_id=2))
        await legacy_session_works(lab, 2)
        assert "result" in await lab.reply(1)  # the late probe answer, harmless
    finally:
        await stop(lab)


async def test_modern_requests_still_served_after_initialize(redis_url: str) -> None:
    """versioning.mdx: "A request carrying modern per-request `_meta` is served statelessly
    according to this revision." The lab serves both eras on one stdio process."""
    lab = await start(redis_url)
    try:
        await lab.send(protocol.initialize_request("dual-era", "1.0", request_id=1))
        await legacy_session_works(lab, 1)
        await lab.send(discover(5))
        found = await lab.reply(5)
        assert MODERN in found["result"]["supportedVersions"], found
    finally:
        await stop(lab)
