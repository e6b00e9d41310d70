"""How the probe reaches a server: the transport (Streamable HTTP, legacy SSE, or a
stdio server command), the handshake (initialize, or server/discover at 2026-07-28,
in the mode ``--protocol`` asks for), the notifications the session hands over, and,
when connecting fails, why in the user's terms (a token wanted, no MCP endpoint at that
path, a legacy SSE endpoint). :class:`ProbeConnection` holds a run's state; the flow
once connected is :class:`mcp_lab.runners.probe.Probe`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any, NamedTuple, TextIO

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_lab import protocol
from mcp_lab.protocol import Transport
from mcp_lab.runners.probe_output import UNREACHABLE, ProbeFailed, Step, emit, progress, reason
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import Scenario

UPDATED, LIST_CHANGED = protocol.UPDATED, protocol.LIST_CHANGED
MODERN = protocol.MODERN
# "modern" negotiates like "auto" (server/discover first) but insists on 2026-07-28.
MODES = {"legacy": "legacy", "modern": "auto", "auto": "auto"}
CLIENT = mcp_types.Implementation(name="mcp-lab-probe", version="1")
HTTP, SSE, STDIO = Transport.STREAMABLE_HTTP, Transport.SSE, Transport.STDIO
# The command's (``--transport``, by short name); the library also takes stdio.
TRANSPORTS = (HTTP.short, SSE.short)
_DIAGNOSE_SECONDS = 5.0
# What an MCP server answers a request with (its errors included).
_JSON_RPC_TYPES = ("application/json", "text/event-stream")


class HttpAnswer(NamedTuple):
    method: str
    status: int
    content_type: str


class ProbeConnection:
    """A run's state and its connection (see :class:`mcp_lab.runners.probe.Probe`)."""

    def __init__(
        self,
        url: str,
        uri: str,
        timeout: float,
        protocol: str,
        token: str | None,
        transport: str = HTTP.short,  # any name of a Transport
        scenario: Scenario | None = None,
        *,
        stdio: StdioServerParameters | None = None,
        errlog: TextIO | None = None,
        on_step: Step = emit,
        say: Callable[[str], None] = progress,
        insist: bool = False,
        prefix: str = "",
        keep_going: bool = False,
    ) -> None:
        self.transport = Transport.named(transport)
        if self.transport == STDIO and stdio is None:
            raise ValueError("the stdio transport needs the server's command (stdio=)")
        self.url, self.timeout, self.protocol = url, timeout, protocol
        # The scenario's URI, and the URI the server serves it as (``prefix``: a gateway
        # that namespaces the resources of the servers behind it).
        self.lab_uri, self.uri, self.prefix = uri, prefix + uri, prefix
        self.stdio, self.errlog = stdio, errlog
        self.emit, self.say, self.insist = on_step, say, insist
        self.keep_going = keep_going
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        # What the lab is expected to do after the subscribe (the scenario's timeline).
        self.scenario = scenario or registry.get(registry.DEFAULT)
        # Notifications as they arrive: (method, uri), from the session or a listen.
        self._sent, self._arrived = anyio.create_memory_object_stream[tuple[str, str | None]](100)
        self._listening = False
        # Set when the server ended the listen stream (with its final result or not).
        self._listen_ended = anyio.Event()
        self._listen_lost = False  # it ended without the final result
        # The client the flow reads with after a stdio reconnect (dropped-stream).
        self._reconnected: Client | None = None
        self.answers: list[HttpAnswer] = []  # every HTTP answer, to explain a failure

    async def _seen(self, response: httpx2.Response) -> None:
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        self.answers.append(HttpAnswer(response.request.method, response.status_code, kind))

    def _http_client(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers={**(headers or {}), **self.headers},
            timeout=timeout or httpx2.Timeout(30, read=300),
            auth=auth,
            event_hooks={"response": [self._seen]},
        )

    async def on_message(self, message: object) -> None:
        if self._listening:  # the listen stream's own events are read from it instead
            return
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            await self._sent.send((UPDATED, str(message.params.uri)))
        elif isinstance(message, mcp_types.ResourceListChangedNotification):
            await self._sent.send((LIST_CHANGED, None))

    def _stdio_client(self) -> Client:
        """A client of a new connection to the stdio server (not entered yet)."""
        assert self.stdio is not None
        transport = stdio_client(self.stdio, errlog=self.errlog or sys.stderr)
        return Client(
            transport,
            mode=MODES[self.protocol],
            client_info=CLIENT,
            message_handler=self.on_message,
        )

    async def _connected_flow(self) -> None:
        async with AsyncExitStack() as stack:
            if self.transport == SSE:
                transport: Any = sse_client(self.url, httpx_client_factory=self._http_client)
            elif self.transport == STDIO:
                assert self.stdio is not None
                transport = stdio_client(self.stdio, errlog=self.errlog or sys.stderr)
            else:
                http = await stack.enter_async_context(self._http_client())
                transport = streamable_http_client(self.url, http_client=http)
            client = Client(
                transport,
                mode="legacy" if self.transport == SSE else MODES[self.protocol],
                client_info=CLIENT,
                message_handler=self.on_message,
            )
            try:
                await stack.enter_async_context(client)
            except Exception as exc:
                raise ProbeFailed(UNREACHABLE, "connect", await self._explain(exc)) from exc
            await self._flow(client)

    async def _explain(self, exc: BaseException) -> str:
        """Why connecting failed, in the user's terms when the HTTP answers tell."""
        failed = [a for a in self.answers if a.status >= 400]
        answer = failed[-1] if failed else None
        where = self.url
        if answer is not None and answer.status == 401:
            if self.headers:
                return f"the server refused the token given with --auth-token (HTTP 401 at {where})"
            return f"the server wants a token (HTTP 401 at {where}): pass --auth-token TOKEN"
        if answer is not None and answer.status == 421:
            return (
                f"the server refused the Host header (HTTP 421 at {where}): see its allowed hosts"
            )
        if self.transport == HTTP and self.answers and await self._is_legacy_sse():
            return (
                f"{where} is a legacy SSE endpoint, not Streamable HTTP: "
                "run the probe with --transport sse (or point it at the Streamable HTTP path)"
            )
        if answer is not None and answer.status in (404, 405):
            sse = self.transport == SSE
            kind, path = ("legacy SSE", "/sse") if sse else ("Streamable HTTP", "/mcp")
            return (
                f"no MCP endpoint at {where} (HTTP {answer.status} to {answer.method}): "
                f"check the path of the server's {kind} endpoint (the lab's is {path})"
            )
        if answer is not None and self.transport == SSE:
            return (
                f"{where} is not a legacy SSE endpoint (HTTP {answer.status} to "
                f"{answer.method}): for a Streamable HTTP endpoint, leave out --transport sse"
            )
        if answer is None and self.answers and self.transport == HTTP:
            kinds = sorted({a.content_type for a in self.answers if a.content_type})
            if kinds and not {"application/json", "text/event-stream"} & set(kinds):
                return f"no MCP endpoint at {where}: it answered {', '.join(kinds)}, not JSON-RPC"
        if answer is not None and answer.content_type not in _JSON_RPC_TYPES:
            kind = f" ({answer.content_type})" if answer.content_type else ""
            return (
                f"this is not an MCP endpoint: {where} answered HTTP {answer.status}{kind} to "
                f"{answer.method}, not JSON-RPC (is the URL a Streamable HTTP endpoint of an "
                "MCP server? the lab's is /mcp)"
            )
        if answer is not None:
            return f"{reason(exc)} (HTTP {answer.status} to {answer.method} at {where})"
        return reason(exc)

    async def _is_legacy_sse(self) -> bool:
        """Whether the URL answers a GET like a legacy SSE endpoint (an ``endpoint`` event)."""
        with anyio.move_on_after(_DIAGNOSE_SECONDS):
            try:
                async with (
                    httpx2.AsyncClient(headers=self.headers, timeout=_DIAGNOSE_SECONDS) as http,
                    http.stream("GET", self.url, headers={"Accept": "text/event-stream"}) as got,
                ):
                    kind = got.headers.get("content-type", "")
                    if got.status_code != 200 or not kind.startswith("text/event-stream"):
                        return False
                    async for line in got.aiter_lines():
                        if line.startswith("event:"):
                            return line.partition(":")[2].strip() == "endpoint"
            except (httpx2.HTTPError, OSError):
                return False
        return False

    async def _flow(self, client: Client) -> None:
        """The flow once connected: :class:`mcp_lab.runners.probe.Probe` has it."""
        raise NotImplementedError

    async def _call(self, step: str, code: int, call: Any) -> Any:
        try:
            return await call
        except MCPError as exc:
            raise ProbeFailed(code, step, reason(exc)) from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise ProbeFailed(UNREACHABLE, step, reason(exc)) from exc
