"""Reads through aiohttp, for ``scripts/bench --client aiohttp``.

Issue 24 measured reads with an aiohttp client, whose own cost per request bounds
the rates it sees (the floor's above all): with it, the floor's rate and the shares
of it come out near the issue's. Same measure as ``bench.reads.reads_per_second``
(``resources/read`` on one session from ``concurrency`` requests at once), over one
``aiohttp.ClientSession`` with a connection pool of ``concurrency``. aiohttp is not a
dependency of the lab: ``pip install aiohttp`` first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time

from rawmcp import PROTOCOL, STATUS_URI, RawClient, Response, jsonrpc_reply

from bench.procs import HOST, cpu_seconds


async def reads_per_second(
    port: int, pid: int, seconds: float, concurrency: int = 16
) -> tuple[float, float]:
    """Reads per second and the server's CPU milliseconds per read (process ``pid``)."""
    import aiohttp  # only here: the rest of the benchmark does without it

    first = RawClient(HOST, port, name="reads-aiohttp")
    await first.initialize()  # the session, as the raw client opens it
    assert first.session_id is not None
    url = f"http://{HOST}:{port}{first.path}"
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Session-Id": first.session_id,
        "MCP-Protocol-Version": PROTOCOL,
    }
    ids = itertools.count(1)
    done = failed = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def loop() -> None:
            nonlocal done, failed
            while time.perf_counter() < deadline:
                message = {
                    "jsonrpc": "2.0",
                    "id": next(ids),  # one id per request in flight: the server keys them
                    "method": "resources/read",
                    "params": {"uri": STATUS_URI},
                }
                async with http.post(url, data=json.dumps(message), headers=headers) as answer:
                    body = await answer.read()
                    got = {k.lower(): v for k, v in answer.headers.items()}
                reply = jsonrpc_reply(Response(answer.status, got, body))
                if answer.status == 200 and reply is not None and "result" in reply:
                    done += 1
                else:
                    failed += 1

        started, cpu = time.perf_counter(), cpu_seconds(pid)
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu
    await first.end()
    if failed:
        print(f"  reads (aiohttp): {failed} failed")
    return done / elapsed, cpu * 1000 / max(done, 1)
