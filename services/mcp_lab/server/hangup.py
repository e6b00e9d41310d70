"""Hanging up: the lab ends the connection of the request it is handling, without that
request's response (the ``dropped-stream`` scenario's abnormal drop of a listen stream).

A request handler calls :func:`hang_up`; what ends depends on the transport, and each
transport's serving code opens the point it can end (:func:`hang_up_point`):

* Streamable HTTP: the request's own response stream (:func:`serve_http`, which the
  lab's ASGI layer puts around each ``subscriptions/listen``). Its body ends where it
  stands, a well-formed end of the HTTP response with no JSON-RPC result in it, and the
  app is cancelled (the listen's cleanup runs, shielded).
* stdio: the process's one connection (``mcp-lab server --transport stdio``,
  :func:`mcp_lab.server.run.run_stdio`): its stdout ends (``mcp_adapter.end_stdio_wire``) and the
  server stops serving, as a server process that dies; the client must start it again
  ("after a stdio reconnect").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_point: ContextVar[anyio.Event | None] = ContextVar("mcp_lab_hang_up", default=None)
_SSE_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
}


def hang_up() -> bool:
    """End the connection of the request being handled, without its response; False
    when its transport opened no point to end (nothing is done then)."""
    asked = _point.get()
    if asked is None:
        return False
    asked.set()
    return True


def can_hang_up() -> bool:
    """Whether the request being handled came over a transport that can hang up."""
    return _point.get() is not None


@contextmanager
def hang_up_point() -> Iterator[anyio.Event]:
    """While inside, :func:`hang_up` (from this task or one it starts) sets the event."""
    asked = anyio.Event()
    token = _point.set(asked)
    try:
        yield asked
    finally:
        _point.reset(token)


async def serve_http(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``app`` for one HTTP request; a :func:`hang_up` while it runs ends the
    response's body where it stands (a stream that began is closed, one that did not is
    an empty event stream) and cancels the app."""
    started = ended = False

    async def tracked(message: Message) -> None:
        nonlocal started, ended
        if message["type"] == "http.response.start":
            started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            ended = True
        await send(message)

    with hang_up_point() as asked:
        async with anyio.create_task_group() as tasks:

            async def run() -> None:
                await app(scope, receive, tracked)
                tasks.cancel_scope.cancel()  # done on its own: nothing to hang up

            tasks.start_soon(run)
            await asked.wait()
            tasks.cancel_scope.cancel()
    if not asked.is_set() or ended:
        return
    if not started:
        await send(_SSE_START)
    await send({"type": "http.response.body", "body": b"", "more_body": False})
