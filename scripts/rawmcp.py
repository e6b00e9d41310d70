"""A raw Streamable HTTP client (MCP 2025-11-25) over asyncio sockets, for load.

No HTTP library: one keep-alive connection per client for its POSTs, and one
more for its GET stream, so thousands of sessions cost little on the client
side. It speaks only what the benchmark and the load test need: initialize,
notifications/initialized, requests with a JSON or an SSE reply, and one GET
stream whose events are parsed as they arrive. Used by ``scripts/bench`` and
``tests/system/test_load.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from mcp_lab import protocol

PROTOCOL = "2025-11-25"
STATUS_URI = "test://review/status"
UPDATED = "notifications/resources/updated"
_ids = itertools.count(1)


class HttpError(Exception):
    """The server answered in a way the client cannot use (a status, a broken body)."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise HttpError(f"bad status line {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _read_chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked body (b"" for the last one)."""
    size_line = await reader.readuntil(b"\r\n")
    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
    data = await reader.readexactly(size + 2) if size else b""
    if not size:
        await reader.readuntil(b"\r\n")  # no trailers are sent by the servers measured
    return data[:-2]


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while chunk := await _read_chunk(reader):
            parts.append(chunk)
        return b"".join(parts)
    length = int(headers.get("content-length", "0"))
    return await reader.readexactly(length) if length else b""


def sse_events(buffer: bytes) -> tuple[list[dict[str, str]], bytes]:
    """Complete SSE events in ``buffer`` (each a dict of its fields, data joined) and
    the unparsed rest."""
    events = []
    buffer = buffer.replace(b"\r\n", b"\n")
    while b"\n\n" in buffer:
        block, buffer = buffer.split(b"\n\n", 1)
        fields: dict[str, str] = {}
        for line in block.decode("utf-8", "replace").split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if fields:
            events.append(fields)
    return events, buffer


def jsonrpc_reply(response: Response) -> dict[str, Any] | None:
    """The JSON-RPC message of a POST reply (JSON, or the first SSE event with data)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events, _ = sse_events(response.body + b"\n\n")
        data = next((e["data"] for e in events if e.get("data")), "")
        return json.loads(data) if data else None
    return json.loads(response.body) if response.body else None


class Connection:
    """One keep-alive HTTP/1.1 connection; requests on it go one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 20
            )
        return self._reader, self._writer

    def _head(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> Response:
        reused = self._writer is not None and not self._writer.is_closing()
        reader, writer = await self._open()
        try:
            writer.write(self._head(method, path, headers, body))
            await writer.drain()
            status, got = await _read_head(reader)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            partial = getattr(exc, "partial", b"")
            if not reused or partial:
                raise
            # The server closed the idle keep-alive connection (uvicorn does after
            # 5 s): as any HTTP client, send again on a new one.
            await self.close()
            reader, writer = await self._open()
            writer.write(self._head(method, path, headers, body))
            await writer.drain()
            status, got = await _read_head(reader)
        data = await _read_body(reader, got)
        if got.get("connection", "").lower() == "close":
            await self.close()
        return Response(status, got, data)

    async def stream(
        self, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], asyncio.StreamReader]:
        """Send a GET and return its status, headers and the reader of its body."""
        reader, writer = await self._open()
        writer.write(self._head("GET", path, headers, b""))
        await writer.drain()
        status, got = await _read_head(reader)
        return status, got, reader

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


@dataclass
class RawClient:
    """One MCP session: POSTs on one connection, an optional GET stream on another."""

    host: str
    port: int
    path: str = "/mcp"
    name: str = "raw-load"
    session_id: str | None = None
    notifications: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    primed: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._post = Connection(self.host, self.port)
        self._get = Connection(self.host, self.port)
        self._reading: asyncio.Task[None] | None = None

    def clone(self) -> RawClient:
        """Another connection for the same session (concurrent requests on one session)."""
        return RawClient(self.host, self.port, self.path, self.name, self.session_id)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = PROTOCOL
        return headers

    async def post(self, message: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        body = json.dumps(message, separators=(",", ":")).encode()
        response = await self._post.request("POST", self.path, self._headers(), body)
        if "mcp-session-id" in response.headers:
            self.session_id = response.headers["mcp-session-id"]
        if response.status != 200:
            return response.status, None
        return response.status, jsonrpc_reply(response)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; its JSON-RPC reply (``result`` or ``error``)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
        if params is not None:
            message["params"] = params
        status, reply = await self.post(message)
        if reply is None:
            raise HttpError(f"{method}: HTTP {status}, no JSON-RPC reply")
        return reply

    async def initialize(self) -> None:
        reply = await self.request(
            protocol.INITIALIZE, protocol.initialize_params(self.name, "1.0", PROTOCOL),
        )
        if "result" not in reply or not self.session_id:
            raise HttpError(f"initialize failed: {reply}")
        status, _ = await self.post(protocol.initialized_notification())
        if status != 202:
            raise HttpError(f"notifications/initialized: HTTP {status}")

    async def open_stream(self, timeout: float = 30.0, live_at_head: bool = False) -> None:
        """Open the GET stream and wait until it is live: its first event or comment,
        or with ``live_at_head`` its 200 head (for a server that sends nothing on a new
        stream, e.g. the TypeScript SDK without an event store: no priming event)."""
        status, headers, reader = await self._get.stream(self.path, self._headers())
        if status != 200:
            raise HttpError(f"GET stream: HTTP {status}")
        if live_at_head:
            self.primed.set()
        self._reading = asyncio.create_task(self._read_stream(reader, headers))
        async with asyncio.timeout(timeout):
            await self.primed.wait()

    async def _read_stream(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        buffer = b""
        try:
            while True:
                data = await _read_chunk(reader) if chunked else await reader.read(65536)
                if not data:
                    return
                self.primed.set()  # the server has flushed its first bytes: the stream is live
                events, buffer = sse_events(buffer + data)
                for fields in events:
                    if fields.get("data"):
                        message = json.loads(fields["data"])
                        if message.get("method") == UPDATED:
                            self.notifications.append((asyncio.get_running_loop().time(), message))
                            self.arrived.set()
        except (OSError, asyncio.IncompleteReadError, ValueError):
            return

    async def wait_notification(self, count: int = 1, timeout: float = 30.0) -> bool:
        """Wait until ``count`` resources/updated notifications came; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.notifications) < count:
                    self.arrived.clear()
                    await self.arrived.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Close both connections without ending the session (no DELETE): fast, as a
        crowd of clients going away at once."""
        if self._reading is not None:
            self._reading.cancel()
        await self._post.close()
        await self._get.close()

    async def end(self) -> bool:
        """DELETE the session, then close; whether the server took the DELETE."""
        ended = False
        if self.session_id:
            try:
                response = await self._post.request("DELETE", self.path, self._headers())
                ended = response.status in (200, 204)
            except (OSError, asyncio.IncompleteReadError, HttpError):
                pass
        await self.close()
        return ended
