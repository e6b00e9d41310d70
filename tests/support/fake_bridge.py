"""A bridge of our own that loses notifications: ``python tests/support/fake_bridge.py --port P
--upstream http://127.0.0.1:LAB/mcp``.

An HTTP->HTTP reverse proxy, like a gateway in front of a Streamable HTTP server: it
passes every request and answer through (SSE streams as they flow), except that it
leaves out each SSE event carrying ``notifications/resources/updated`` (``--drop``
names another method). ``tests/system/test_bridges.py`` runs it through the bridges runner,
which must say: the subscribe reached the lab, the lab delivered the notification,
and it never reached the client.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


def _method(block: bytes) -> str | None:
    data = b"\n".join(line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:"))
    try:
        message = json.loads(data) if data else None
    except ValueError:
        return None
    return message.get("method") if isinstance(message, dict) else None


def app(upstream: str, drop: str) -> Starlette:
    client = httpx2.AsyncClient(timeout=httpx2.Timeout(10.0, read=None))

    async def forward(request: Request) -> Response:
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        sent = client.build_request(
            request.method, upstream, headers=headers, content=await request.body()
        )
        answer = await client.send(sent, stream=True)
        kept = [(k, v) for k, v in answer.headers.items() if k.lower() not in _HOP]
        if not answer.headers.get("content-type", "").startswith("text/event-stream"):
            content = await answer.aread()
            await answer.aclose()
            return Response(content, answer.status_code, headers=dict(kept))

        async def events() -> AsyncIterator[bytes]:
            buffer = b""
            async for chunk in answer.aiter_raw():
                buffer += chunk.replace(b"\r\n", b"\n")
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    if _method(block) != drop:
                        yield block + b"\n\n"

        return StreamingResponse(
            events(), answer.status_code, headers=dict(kept),
            background=BackgroundTask(answer.aclose),
        )  # fmt: skip

    return Starlette(routes=[Route("/mcp", forward, methods=["GET", "POST", "DELETE"])])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--drop", default="notifications/resources/updated")
    args = parser.parse_args()
    uvicorn.run(app(args.upstream, args.drop), host="127.0.0.1", port=args.port,
                log_level="warning")  # fmt: skip


if __name__ == "__main__":
    main()
