"""The floor: a bare asyncio HTTP server speaking the protocol subset the benchmark uses.

Streamable HTTP 2025-11-25, nothing else: initialize (a session id), the
initialized notification (202), one GET stream per session (a priming event,
then notifications), resources/read, resources/subscribe and unsubscribe. No
state store, no evidence, no resumption, no checks: what any server has to do at
least to answer the same bytes, so ``scripts/bench`` can show the lab's cost
as a ratio to it. After a subscribe it notifies the session at once, or ``--delay``
seconds later (the lab's updater does that through Redis); with ``--redis-url`` it
also listens on the updates channel and notifies every subscribed session of each
message (fan-out).

    python scripts/floor.py --port 8099 [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from typing import Any

TEXT = "status: pending\nversion: 1\nmessage: Waiting for simulated review result.\n"
URI = "test://review/status"


class Floor:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.streams: dict[str, asyncio.StreamWriter] = {}
        self.subscribed: dict[str, set[str]] = {}
        self.serial = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, _path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                session = headers.get("mcp-session-id", "")
                if method == "GET":
                    await self.stream(session, writer)
                    return
                if method == "DELETE":
                    self.subscribed.pop(session, None)
                    self.reply(writer, 200, b"", "")
                    continue
                await self.post(session, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def reply(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, kind: str, extra: str = ""
    ) -> None:
        reason = {200: "OK", 202: "Accepted", 404: "Not Found"}.get(status, "OK")
        content = f"Content-Type: {kind}\r\n" if kind else ""
        head = f"HTTP/1.1 {status} {reason}\r\n{content}{extra}"
        writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)

    async def post(self, session: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        message = json.loads(body)
        method = message.get("method")
        if "id" not in message:
            self.reply(writer, 202, b"", "")
            return
        extra = ""
        result: dict[str, Any] = {}
        if method == "initialize":
            session = uuid.uuid4().hex
            self.subscribed[session] = set()
            extra = f"mcp-session-id: {session}\r\n"
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"resources": {"subscribe": True, "listChanged": True}},
                "serverInfo": {"name": "floor", "version": "0"},
            }
        elif session not in self.subscribed:
            self.reply(writer, 404, b"", "")
            return
        elif method == "resources/read":
            result = {"contents": [{"uri": URI, "mimeType": "text/plain", "text": TEXT}]}
        elif method == "resources/subscribe":
            self.subscribed[session].add(message["params"]["uri"])
        elif method == "resources/unsubscribe":
            self.subscribed[session].discard(message["params"]["uri"])
        reply = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        self.serial += 1
        data = f"event: message\nid: {self.serial}\ndata: {reply}\n\n".encode()
        self.reply(writer, 200, data, "text/event-stream", extra)
        await writer.drain()
        if method == "resources/subscribe":
            uri = message["params"]["uri"]
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self.notify, session, uri)
            else:
                self.notify(session, uri)

    async def stream(self, session: str, writer: asyncio.StreamWriter) -> None:
        if session not in self.subscribed:
            self.reply(writer, 404, b"", "")
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-store\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        self.streams[session] = writer
        self.chunk(writer, b"id: 0\nretry: 1000\ndata:\n\n")
        try:
            await writer.drain()
            await writer.wait_closed()
        finally:
            self.streams.pop(session, None)

    @staticmethod
    def chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def notify(self, session: str, uri: str) -> None:
        writer = self.streams.get(session)
        if writer is None or uri not in self.subscribed.get(session, ()):
            return
        self.serial += 1
        note = json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}
        )
        self.chunk(writer, f"event: message\nid: {self.serial}\ndata: {note}\n\n".encode())

    async def listen(self, redis_url: str, channel: str) -> None:
        from redis.asyncio import Redis

        redis = Redis.from_url(redis_url)
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(channel)
        print("floor subscribed", flush=True)
        async for message in pubsub.listen():
            uri = json.loads(message["data"]).get("uri", URI)
            for session in list(self.streams):
                self.notify(session, uri)


async def serve(port: int, redis_url: str | None, channel: str, delay: float) -> None:
    floor = Floor(delay)
    server = await asyncio.start_server(floor.handle, "127.0.0.1", port, backlog=4096)
    tasks = []
    if redis_url:
        tasks.append(asyncio.create_task(floor.listen(redis_url, channel)))
    print(f"floor ready port={port}", flush=True)
    async with server:
        with contextlib.suppress(asyncio.CancelledError):
            await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--channel", default="mcp:resources:updated")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds from subscribe to notify")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.redis_url, args.channel, args.delay))


if __name__ == "__main__":
    main()
