"""The lab in the test's own event loop: no processes, no sockets for the app.

``InProcLab`` runs a server (the ASGI app of ``mcp_lab.server.app.http_app``,
wrapped in its guard, with its lifespan: relay, replica heartbeat) and updaters
(``mcp_lab.updater.Updater.run`` as a task) against the real Redis of the test.
Clients reach a server through :class:`StreamingASGITransport`, an httpx2
transport that hands each request to the app in memory and streams the response
as the app sends it (httpx2's own ``ASGITransport`` buffers the whole body, so the
GET stream of Streamable HTTP would never arrive). :func:`http_client` gives the
real mcp SDK client (``streamable_http_client``) such a transport for the URL of
an in-process server, so ``tests.support.lab.connect`` works against both kinds.

Every log line of the lab (the ``mcp_lab`` logger, and warnings of any other
logger) is captured per component through a context variable that the server's
and updater's tasks inherit, so ``server.await_line(...)`` reads what that server
logged, as ``LabProcess`` reads a process's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
from collections.abc import AsyncIterator, Coroutine, Iterator
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
from starlette.types import ASGIApp, Message

from mcp_lab import state
from mcp_lab.process.embedded_redis import free_port
from mcp_lab.runners import matrix_history
from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
from mcp_lab.runners.clients.history import CLIENT_HISTORY
from mcp_lab.server.app import http_app
from mcp_lab.server.asgi import guard
from mcp_lab.settings import LabSettings
from mcp_lab.updater import Updater

_component: contextvars.ContextVar[LogLines | None] = contextvars.ContextVar(
    "lab_component", default=None
)
# netloc (127.0.0.1:port) -> the in-process server answering there
_servers: dict[str, InProcServer] = {}
T = TypeVar("T")
_FORMAT = logging.Formatter("%(levelname)-7s %(message)s")
START_SECONDS = 15.0


class LogLines:
    """The log of one in-process component, line by line, with waits on new lines."""

    def __init__(self, name: str, level: str) -> None:
        self.name = name
        self.level = logging.getLevelName(level.upper())
        if not isinstance(self.level, int):
            self.level = logging.INFO
        self._lines: list[str] = []
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()

    def add(self, text: str) -> None:
        self._lines.extend(text.splitlines() or [""])
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._notify()
        else:  # logged from another thread
            self._loop.call_soon_threadsafe(self._notify)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def mark(self) -> int:
        """Index of the next line; pass as ``since`` to wait only for lines after now."""
        return len(self._lines)

    def matching(self, pattern: str, since: int = 0) -> list[str]:
        regex = re.compile(pattern)
        return [line for line in self._lines[since:] if regex.search(line)]

    async def await_line(self, pattern: str, timeout: float = 15.0, since: int = 0) -> str:
        """The first line (from index ``since``) matching the regex ``pattern``, waiting
        up to ``timeout`` seconds for it."""
        regex = re.compile(pattern)
        deadline = self._loop.time() + timeout
        index = since
        while True:
            while index < len(self._lines):
                if regex.search(self._lines[index]):
                    return self._lines[index]
                index += 1
            remaining = deadline - self._loop.time()
            changed = self._changed
            try:
                if remaining <= 0:
                    raise TimeoutError
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                tail = "\n".join(self._lines[-40:])
                raise AssertionError(
                    f"{self.name}: no line matching {pattern!r} within {timeout}s; "
                    f"last lines:\n{tail}"
                ) from None


class _Capture(logging.Handler):
    """Routes each log record to the component whose task logged it."""

    def emit(self, record: logging.LogRecord) -> None:
        lines = _component.get()
        if lines is None:
            return
        wanted = lines.level if record.name.startswith("mcp_lab") else logging.WARNING
        if record.levelno < wanted:
            return
        try:
            lines.add(_FORMAT.format(record))
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def captured_logs() -> Iterator[None]:
    """Capture the lab's log lines for the components started meanwhile."""
    handler = _Capture(logging.DEBUG)
    lab_logger = logging.getLogger("mcp_lab")
    root = logging.getLogger()
    level = lab_logger.level
    root.addHandler(handler)
    lab_logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        lab_logger.setLevel(level)


def _in_context(lines: LogLines) -> contextvars.Context:
    context = contextvars.copy_context()
    context.run(_component.set, lines)
    return context


class _ResponseBody(httpx2.AsyncByteStream):
    def __init__(self, queue: asyncio.Queue[bytes | BaseException | None], closed: Any) -> None:
        self._queue = queue
        self._closed = closed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._queue.get()
            if chunk is None:
                return
            if isinstance(chunk, BaseException):
                raise httpx2.ReadError(f"the app failed mid-response: {chunk!r}")
            yield chunk

    async def aclose(self) -> None:
        self._closed()


class StreamingASGITransport(httpx2.AsyncBaseTransport):
    """Hands each request to an ASGI app in memory and streams the response back as
    the app sends it. Closing the response is the client going away: the app's
    ``receive`` then says ``http.disconnect``, as a server's does."""

    def __init__(self, app: ASGIApp, lines: LogLines, client: tuple[str, int]) -> None:
        self._app = app
        self._lines = lines
        self._client = client
        self._tasks: set[asyncio.Task[None]] = set()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        assert isinstance(request.stream, httpx2.AsyncByteStream)
        loop = asyncio.get_running_loop()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": self._client,
            "root_path": "",
            "state": {},
        }
        started: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = loop.create_future()
        body: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        gone = asyncio.Event()
        chunks = request.stream.__aiter__()
        request_read = False

        async def receive() -> Message:
            nonlocal request_read
            if not request_read:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    request_read = True
                    return {"type": "http.request", "body": b"", "more_body": False}
                return {"type": "http.request", "body": chunk, "more_body": True}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if gone.is_set():
                return  # the client left: what the app sends now goes nowhere
            if message["type"] == "http.response.start":
                started.set_result((message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body":
                if message.get("body") and request.method != "HEAD":
                    body.put_nowait(message["body"])
                if not message.get("more_body", False):
                    body.put_nowait(None)

        async def run() -> None:
            try:
                await self._app(scope, receive, send)
            except Exception as exc:
                # What uvicorn does: log it; a 500 if no response started yet.
                logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
                if not started.done():
                    started.set_result((500, [(b"content-type", b"text/plain")]))
                    body.put_nowait(b"Internal Server Error")
                    body.put_nowait(None)
                else:
                    body.put_nowait(exc)
            else:
                if not started.done():
                    started.set_exception(RuntimeError("the app returned without a response"))
                body.put_nowait(None)

        task = loop.create_task(run(), context=_in_context(self._lines))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        status, headers = await started
        return httpx2.Response(status, headers=headers, stream=_ResponseBody(body, gone.set))

    async def close_all(self) -> list[str]:
        """Cancel what the app still runs for requests (streams nobody closed);
        returns the tasks that did not end."""
        return await finish(list(self._tasks), cancel=True)


def lab_settings(redis_url: str, **settings: str) -> LabSettings:
    """Settings from ``settings`` only (as ``lab_env`` gives a process): no
    ``MCP_TEST_*`` variable of the test runner and no ``.env`` file apply."""
    return LabSettings(  # type: ignore[call-arg]
        _env_file=None,
        _env_prefix="MCP_LAB_INPROC_UNUSED_",
        REDIS_URL=redis_url,
        **settings,
    )


class InProcServer(LogLines):
    """One server replica in this event loop: its app, lifespan and log."""

    def __init__(self, settings: LabSettings) -> None:
        super().__init__(f"server:{settings.port}", settings.log_level)
        self.settings = settings
        dashboard = partial(matrix_history.matrix, CLIENT_HISTORY, BRIDGE_HISTORY)
        app, self.lab = http_app(settings, matrix=dashboard)
        self.app: ASGIApp = guard(app, settings)
        self.url = settings.mcp_url
        self.transport = StreamingASGITransport(self.app, self, ("127.0.0.1", 50000))
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Run the app's lifespan (relay, heartbeat) until :meth:`stop`."""
        up: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(
            self._lifespan(up), context=_in_context(self)
        )
        await asyncio.wait_for(up, START_SECONDS)
        await asyncio.wait_for(self.lab.relay.subscribed.wait(), START_SECONDS)
        logging.getLogger("mcp_lab").info(
            "[lab] server ready url=%s (in process) relay=%s", self.url, self.lab.relay.state
        )

    async def run_here(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` as part of this server: its log lines are this server's."""
        return await asyncio.get_running_loop().create_task(work, context=_in_context(self))

    async def _lifespan(self, up: asyncio.Future[None]) -> None:
        to_app: asyncio.Queue[Message] = asyncio.Queue()
        to_app.put_nowait({"type": "lifespan.startup"})

        async def receive() -> Message:
            return await to_app.get()

        async def send(message: Message) -> None:
            kind = message["type"]
            if kind == "lifespan.startup.complete":
                up.set_result(None)
                await self._stop.wait()
                to_app.put_nowait({"type": "lifespan.shutdown"})
            elif kind == "lifespan.startup.failed" and not up.done():
                up.set_exception(RuntimeError(message.get("message", "startup failed")))

        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            if not up.done():
                up.set_exception(exc)
            raise

    async def stop(self) -> list[str]:
        """Close open requests, run the lifespan's shutdown; what did not end, if any."""
        stuck = await self.transport.close_all()
        self._stop.set()
        if self._task is not None:
            stuck += await finish([self._task], cancel=False)
            if not self._task.cancelled() and self._task.done() and self._task.exception():
                stuck.append(f"lifespan failed: {self._task.exception()!r}")
        return stuck


class InProcUpdater(LogLines):
    """One updater (``Updater.run``) as a task in this event loop."""

    def __init__(self, settings: LabSettings, name: str) -> None:
        super().__init__(name, settings.log_level)
        self.settings = settings
        self._redis = state.connect(settings.redis_url)
        self.updater = Updater(settings, self._redis)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self.updater.run(), context=_in_context(self)
        )
        await self.await_line(r"\[updater\] ready", timeout=START_SECONDS)

    async def burst(self, timeout: float) -> None:
        """Run it in burst mode to its end: every job in the stream applied, when due."""
        self._task = asyncio.get_running_loop().create_task(
            self.updater.run(burst=True), context=_in_context(self)
        )
        done, _ = await asyncio.wait([self._task], timeout=timeout)
        if not done:
            raise AssertionError(f"{self.name}: burst not done within {timeout}s")
        self._task.result()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def kill(self) -> list[str]:
        """Stop it as a crash would: its heartbeat is left to expire and the jobs it
        took stay pending (cancelling ``run`` cancels the jobs it scheduled).
        Returns what did not end, if anything."""
        stuck = await finish([self._task], cancel=True) if self._task is not None else []
        await self.updater.close()
        await self._redis.aclose()
        return stuck

    stop = kill


class InProcLab:
    """Starts in-process servers and updaters for one test; stops them all afterwards."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._servers: list[InProcServer] = []
        self._updaters: list[InProcUpdater] = []

    async def server(self, **settings: str) -> tuple[InProcServer, str]:
        """A started server; returns it and its MCP URL (served in memory only)."""
        server = InProcServer(lab_settings(self.redis_url, port=str(free_port()), **settings))
        _servers[urlsplit(server.url).netloc] = server
        self._servers.append(server)
        await server.start()
        return server, server.url

    async def updater(self, **settings: str) -> InProcUpdater:
        """A started updater (it has logged ``[updater] ready``)."""
        lab_settings_ = lab_settings(self.redis_url, **settings)
        name = f"updater:{lab_settings_.updater_consumer}:{len(self._updaters)}"
        updater = InProcUpdater(lab_settings_, name)
        self._updaters.append(updater)
        await updater.start()
        return updater

    async def apply_all(self, timeout: float = 30.0, **settings: str) -> InProcUpdater:
        """Apply every job in the stream now, each when due: an updater in burst mode
        (``Updater.run(burst=True)``), run to its end (bounded by ``timeout``)."""
        lab_settings_ = lab_settings(self.redis_url, **settings)
        updater = InProcUpdater(lab_settings_, f"updater:{lab_settings_.updater_consumer}:burst")
        self._updaters.append(updater)
        await updater.burst(timeout)
        return updater

    async def aclose(self) -> None:
        """Stop everything; a part that does not stop is an error naming it."""
        stuck: list[str] = []
        for updater in self._updaters:
            stuck += [f"{updater.name}: {s}" for s in await updater.kill()]
        for server in self._servers:
            stuck += [f"{server.name}: {s}" for s in await server.stop()]
            _servers.pop(urlsplit(server.url).netloc, None)
        if stuck:
            raise AssertionError("in-process lab did not stop:\n" + "\n".join(stuck))


async def finish(
    tasks: list[asyncio.Task[Any]], *, cancel: bool, seconds: float = 10.0
) -> list[str]:
    """Wait (bounded) for ``tasks`` to end, cancelling them first with ``cancel`` and
    after ``seconds`` anyway; the ones that still run, with where they are."""
    if cancel:
        for task in tasks:
            task.cancel()
    pending = {t for t in tasks if not t.done()}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=seconds)
    if pending and not cancel:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=seconds)
    return [f"{task.get_name()} still runs at {task.get_stack(limit=3)!r}" for task in pending]


def http_client(url: str) -> httpx2.AsyncClient | None:
    """An httpx2 client that reaches the in-process server of ``url`` in memory, or
    None when no in-process server answers there (a real one may)."""
    server = _servers.get(urlsplit(url).netloc)
    if server is None:
        return None
    return httpx2.AsyncClient(
        transport=server.transport,
        timeout=httpx2.Timeout(30, read=300),
        base_url=f"http://{urlsplit(url).netloc}",
    )


async def api_report(url: str) -> dict:
    http = http_client(url)
    assert http is not None, f"no in-process server at {url}"
    async with http:
        response = await http.get("/api/report")
    assert response.status_code == 200, response.text
    return response.json()


def client_entry(data: dict, name: str) -> dict:
    matches = [c for c in data["clients"] if c["client"] == name]
    assert len(matches) == 1, data["clients"]
    return matches[0]
