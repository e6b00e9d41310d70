"""Helpers for the integration tests: lab processes and a recording MCP client.

Every wait here is on an event (a log line, a notification) and has a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcp_lab import protocol
from tests.support import inproc

ROOT = Path(__file__).resolve().parent.parent.parent
STATUS_URI = "test://review/status"
# The official TypeScript SDK client (flow.mjs); see the node_client fixture.
TS_CLIENT_DIR = ROOT / "tests" / "support" / "ts_client"


# Set by ``dev.py test --quick``: a test that starts a lab process is not quick.
QUICK = os.environ.get("MCP_LAB_TEST_QUICK") == "1"


def _not_in_a_quick_run(what: str) -> None:
    """In a ``--quick`` run, skip a test that starts ``what`` (it lacks the ``process``
    marker); fail it under CI=true, where nothing skips for a missing part."""
    if not QUICK:
        return
    import pytest

    reason = f"starts {what}: mark the test @pytest.mark.process (left out by --quick)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# Set per test by conftest: whether the running test is a coroutine. A sync test may
# see a running loop that is not its own (Playwright's sync API keeps one), and
# may block; an async test blocking its own loop may not.
IN_ASYNC_TEST = False


def refuse_on_event_loop(call: str, instead: str) -> None:
    """Raise if an async test calls a blocking wait in its loop's thread: the wait
    stalls every task on that loop (an in-process server, the test's own clients)
    for as long as it waits. In a worker thread (``anyio.to_thread``) no loop runs,
    and the wait is fine."""
    if not IN_ASYNC_TEST:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{call} blocks, and an event loop runs in this thread: use {instead}")


class LabProcess:
    """A lab process (``mcp-lab server`` or ``updater``) with its output captured."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        _not_in_a_quick_run(f"a lab process ({name})")
        self.name = name
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def lines(self) -> list[str]:
        with self._cond:
            return list(self._lines)

    def mark(self) -> int:
        """Index of the next line; pass as ``since`` to wait only for lines after now."""
        with self._cond:
            return len(self._lines)

    def wait_for(self, pattern: str, timeout: float = 15.0, since: int = 0) -> str:
        """Block until a line (from index ``since``) matches the regex ``pattern``.
        Refused on an event loop: there, ``await`` :meth:`await_line`."""
        refuse_on_event_loop("LabProcess.wait_for", "await proc.await_line(...)")
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            index = since
            while True:
                while index < len(self._lines):
                    if regex.search(self._lines[index]):
                        return self._lines[index]
                    index += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (
                    self.process.poll() is not None and not self._reader.is_alive()
                ):
                    tail = "\n".join(self._lines[-40:])
                    raise AssertionError(
                        f"{self.name}: no line matching {pattern!r} within {timeout}s "
                        f"(exit code {self.process.poll()}); last lines:\n{tail}"
                    )
                self._cond.wait(remaining)

    async def await_line(self, pattern: str, timeout: float = 15.0, since: int = 0) -> str:
        """``wait_for`` without blocking the event loop."""
        return await anyio.to_thread.run_sync(lambda: self.wait_for(pattern, timeout, since))

    def matching(self, pattern: str, since: int = 0) -> list[str]:
        regex = re.compile(pattern)
        return [line for line in self.lines[since:] if regex.search(line)]

    def stop(self, sig: int = signal.SIGINT) -> int:
        """Stop the process (SIGINT, then SIGKILL after 10 s); returns its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._reader.join(timeout=5)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to clean up."""
        self.stop(signal.SIGKILL)


def lab_env(redis_url: str, **settings: str) -> dict[str, str]:
    """Environment for a lab process: REDIS_URL plus ``MCP_TEST_<KEY>`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
    env["REDIS_URL"] = redis_url
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in settings.items():
        env[f"MCP_TEST_{key.upper()}"] = value
    return env


def mcp_lab(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one ``mcp-lab`` command to completion (bounded) with ``env``.
    Blocking: in an async test use :func:`amcp_lab` (this one refuses to run there)."""
    refuse_on_event_loop("mcp_lab", "await amcp_lab(...)")
    _not_in_a_quick_run(f"mcp-lab {' '.join(args[:1])}")
    return subprocess.run(
        [sys.executable, "-m", "mcp_lab", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def amcp_lab(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`mcp_lab` without blocking the event loop."""
    return await anyio.to_thread.run_sync(lambda: mcp_lab(env, *args))


def start_server(redis_url: str, port: int, **settings: str) -> LabProcess:
    """Start ``mcp-lab server`` and wait until it serves and its relay listens
    (blocking: in an async test, ``await lab.aserver(...)``)."""
    refuse_on_event_loop("start_server", "await lab.aserver(...)")
    env = lab_env(redis_url, port=str(port), **settings)
    proc = LabProcess(f"server:{port}", [sys.executable, "-m", "mcp_lab", "server"], env)
    proc.wait_for(r"\[lab\] server ready .*relay=subscribed", timeout=30)
    return proc


def start_updater(redis_url: str, **settings: str) -> LabProcess:
    """Start ``mcp-lab updater`` and wait until it reads jobs (blocking: in an async
    test, ``await lab.aupdater(...)``)."""
    refuse_on_event_loop("start_updater", "await lab.aupdater(...)")
    env = lab_env(redis_url, **settings)
    proc = LabProcess("updater", [sys.executable, "-m", "mcp_lab", "updater"], env)
    proc.wait_for(r"\[updater\] ready", timeout=30)
    return proc


@dataclass
class LabClient:
    """A real MCP client session (mcp SDK, Streamable HTTP) that records notifications."""

    session: ClientSession
    name: str
    init: mcp_types.InitializeResult | None = None
    updated: list[str] = field(default_factory=list)
    list_changed: int = 0
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    async def on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, mcp_types.ResourceListChangedNotification):
            self.list_changed += 1
        else:
            return
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait_updated(self, count: int = 1, timeout: float = 10.0) -> list[str]:
        """Wait until ``count`` resources/updated notifications have arrived."""
        with anyio.fail_after(timeout):
            while len(self.updated) < count:
                await self._arrived.wait()
        return list(self.updated)

    async def wait_list_changed(self, count: int = 1, timeout: float = 10.0) -> int:
        """Wait until ``count`` resources/list_changed notifications have arrived."""
        with anyio.fail_after(timeout):
            while self.list_changed < count:
                await self._arrived.wait()
        return self.list_changed

    async def read_text(self, uri: str = STATUS_URI) -> str:
        result = await self.session.read_resource(uri)
        content = result.contents[0]
        assert isinstance(content, mcp_types.TextResourceContents)
        return content.text


def version_of(text: str) -> int:
    """The version number in the resource text."""
    match = re.search(r"^version: (\d+)$", text, re.MULTILINE)
    assert match, f"no version line in {text!r}"
    return int(match.group(1))


@asynccontextmanager
async def _recording_session(read: Any, write: Any, name: str) -> AsyncIterator[LabClient]:
    client: LabClient | None = None

    async def handler(message: object) -> None:
        if client is not None:
            await client.on_message(message)

    async with ClientSession(
        read,
        write,
        message_handler=handler,  # type: ignore[arg-type]
        client_info=mcp_types.Implementation(name=name, version="1.0"),
    ) as session:
        client = LabClient(session=session, name=name)
        client.init = await session.initialize()
        yield client


@asynccontextmanager
async def connect(url: str, name: str = "pytest-client") -> AsyncIterator[LabClient]:
    """An initialized 2025-11-25 session over Streamable HTTP whose client name is ``name``
    (in memory when ``url`` is an in-process server's, see tests/support/inproc.py)."""
    async with contextlib.AsyncExitStack() as stack:
        http = inproc.http_client(url)
        if http is not None:
            await stack.enter_async_context(http)
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        yield await stack.enter_async_context(_recording_session(read, write, name))


@asynccontextmanager
async def connect_sse(url: str, name: str = "pytest-sse-client") -> AsyncIterator[LabClient]:
    """An initialized session over the legacy SSE transport."""
    async with sse_client(url) as (read, write):
        async with _recording_session(read, write, name) as client:
            yield client


def stdio_server(env: dict[str, str]) -> StdioServerParameters:
    """How to launch ``mcp-lab server --transport stdio`` as an MCP client would."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_lab", "server", "--transport", "stdio"],
        env=env,
        cwd=ROOT,
    )


@asynccontextmanager
async def connect_stdio(
    env: dict[str, str], errlog: Any, name: str = "pytest-stdio-client"
) -> AsyncIterator[LabClient]:
    """Launch the lab over stdio (its stderr to ``errlog``) and initialize a session."""
    async with stdio_client(stdio_server(env), errlog=errlog) as (read, write):
        async with _recording_session(read, write, name) as client:
            yield client


class RawSession:
    """A hand-made Streamable HTTP client: JSON-RPC over POST, and no GET stream
    unless asked for. For clients that the SDK would not imitate."""

    def __init__(self, url: str, name: str = "raw-client") -> None:
        import httpx2

        self.url = url
        self.name = name
        self.session_id: str | None = None
        self._http = inproc.http_client(url) or httpx2.AsyncClient(timeout=10)
        self._next_id = 0
        self.last_response = ""

    async def close(self) -> None:
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = "2025-11-25"
        return headers

    async def post(self, body: object) -> tuple[int, dict | None]:
        """POST one JSON-RPC message; returns the status and the JSON-RPC reply, if any."""
        import json

        response = await self._http.post(self.url, json=body, headers=self._headers())
        if "mcp-session-id" in response.headers:
            self.session_id = response.headers["mcp-session-id"]
        text = response.text
        # What came, for a failing assertion to show.
        self.last_response = f"{response.headers.get('content-type')}: {text[:300]!r}"
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            text = next((d for d in data if d), "")
        return response.status_code, (json.loads(text) if text else None)

    async def request(self, method: str, params: dict | None = None) -> dict:
        self._next_id += 1
        body: dict = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            body["params"] = params
        status, reply = await self.post(body)
        assert status == 200 and reply is not None, (status, reply, self.last_response)
        return reply

    async def initialize(self) -> dict:
        reply = await self.request(
            protocol.INITIALIZE, protocol.initialize_params(self.name),
        )
        status, _ = await self.post(protocol.initialized_notification())
        assert status == 202
        return reply
