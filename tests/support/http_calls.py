"""Plain HTTP to a lab: POST and /healthz over the network to a server process, and
GET/POST in memory to an in-process server (tests/support/inproc.py)."""

from __future__ import annotations

import json

import anyio
import httpx2

from tests.support.inproc import http_client

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(url: str, body: object, **headers: str) -> httpx2.Response:
    """POST to a real server (a process)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx2.post(url, content=content, headers={**HEADERS, **headers}, timeout=10)


async def apost(url: str, body: object, **headers: str) -> httpx2.Response:
    """POST to the in-process server of ``url``, in memory."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with client_of(url) as client:
        return await client.post(url, content=content, headers={**HEADERS, **headers})


async def aget(url: str, **headers: str) -> httpx2.Response:
    async with client_of(url) as client:
        return await client.get(url, headers=headers)


def client_of(url: str) -> httpx2.AsyncClient:
    client = http_client(url)
    assert client is not None, f"no in-process server at {url}"
    return client


async def healthz(port: int) -> bool:
    """One GET /healthz on a new connection: True when answered 200."""
    try:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            return (await stream.receive()).startswith(b"HTTP/1.1 200")
    except (OSError, anyio.EndOfStream):
        return False
