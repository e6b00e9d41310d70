"""An HTTP server inside a process that runs other things: the clients and bridges
runners' scripted model endpoint and wire taps.

uvicorn's ``Server.serve`` takes over SIGINT and SIGTERM for as long as it serves
and puts back, when it stops, the handlers it found. Two servers of one process whose
lives overlap (two wire taps of one run, runs side by side) put them back out of
order: the last one to stop restores the handler of the first, a method of a server
that has stopped. sse-starlette finds uvicorn's server through that handler and ends
every SSE response of the process once it says ``should_exit`` (a test process's
later in-process servers answered a POST with its priming event only). These servers
leave the process's signals alone: the process that embeds them handles its own.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import uvicorn
from starlette.types import ASGIApp

_STOP_SECONDS = 10.0


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that does not take over the process's signal handlers."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port for the duration; yields its base URL.

    The socket is bound before the server starts, so a client that connects at once
    waits in the backlog instead of being refused.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = EmbeddedServer(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, _STOP_SECONDS)
        except TimeoutError:
            task.cancel()
        sock.close()
