"""``mcp-lab probe``: the ideal subscription flow against any MCP server, step by step.

connect (initialize, or server/discover at 2026-07-28) -> list -> read ->
subscribe (or subscriptions/listen) -> wait for notifications/resources/updated
-> read again -> unsubscribe. One JSON object per line on stdout per step, and
an exit code that names the first failure:

    0  the whole flow worked
    3  server unreachable, or the connection/handshake failed
    4  resource not found (not listed, or the read failed)
    5  subscribe refused (no resources.subscribe capability, or an error)
    6  no notification within --timeout
    7  another protocol error
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

OK, UNREACHABLE, NOT_FOUND, SUBSCRIBE_REFUSED, NO_NOTIFICATION, PROTOCOL_ERROR = 0, 3, 4, 5, 6, 7
MODERN = "2026-07-28"
# "modern" negotiates like "auto" (server/discover first) but insists on 2026-07-28.
MODES = {"legacy": "legacy", "modern": "auto", "auto": "auto"}
CLIENT = mcp_types.Implementation(name="mcp-lab-probe", version="1")


class ProbeFailed(Exception):
    def __init__(self, code: int, step: str, message: str) -> None:
        super().__init__(message)
        self.code, self.step, self.message = code, step, message


def emit(step: str, **fields: Any) -> None:
    """One JSON line on stdout. If the reader went away (``| head``), go on silently."""
    try:
        print(json.dumps({"step": step, **fields}, default=str), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _text(result: mcp_types.ReadResourceResult) -> str:
    return "\n".join(getattr(c, "text", "") or "" for c in result.contents)


class Probe:
    """One run of the flow; ``run`` returns the exit code."""

    def __init__(
        self, url: str, uri: str, timeout: float, protocol: str, token: str | None
    ) -> None:
        self.url, self.uri, self.timeout, self.protocol = url, uri, timeout, protocol
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.updated = anyio.Event()

    async def on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            if str(message.params.uri) == self.uri:
                self.updated.set()

    async def run(self) -> int:
        started = time.monotonic()
        try:
            await self._connected_flow()
        except BaseException as exc:  # anyio may wrap the failure in an exception group
            failure = _failure_in(exc)
            if failure is None:
                raise
            emit(
                "summary",
                ok=False,
                exit_code=failure.code,
                failed_step=failure.step,
                message=failure.message,
                seconds=round(time.monotonic() - started, 3),
            )
            return failure.code
        emit("summary", ok=True, exit_code=OK, seconds=round(time.monotonic() - started, 3))
        return OK

    async def _connected_flow(self) -> None:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=self.headers, timeout=30)
            )
            client = Client(
                streamable_http_client(self.url, http_client=http),
                mode=MODES[self.protocol],
                client_info=CLIENT,
                message_handler=self.on_message,  # type: ignore[arg-type]
            )
            try:
                await stack.enter_async_context(client)
            except Exception as exc:
                raise ProbeFailed(UNREACHABLE, "connect", _reason(exc)) from exc
            await self._flow(client)

    async def _flow(self, client: Client) -> None:
        if self.protocol == "modern" and client.protocol_version != MODERN:
            raise ProbeFailed(
                PROTOCOL_ERROR,
                "connect",
                f"the server negotiated {client.protocol_version}, not {MODERN}",
            )
        caps = client.server_capabilities
        resources = caps.resources if caps is not None else None
        emit(
            "capabilities",
            protocol=client.protocol_version,
            resources=resources.model_dump(exclude_none=True) if resources else None,
        )
        listed = await self._call("list", NOT_FOUND, client.list_resources())
        uris = [str(r.uri) for r in listed.resources]
        if self.uri not in uris:
            raise ProbeFailed(NOT_FOUND, "resource", f"{self.uri} not in resources/list {uris}")
        emit("resource", uri=self.uri, found=True)
        first = await self._call("read", NOT_FOUND, client.read_resource(self.uri))
        emit("initial_content", text=_text(first))
        if resources is None or not resources.subscribe:
            raise ProbeFailed(
                SUBSCRIBE_REFUSED, "subscribe", "the server does not advertise resources.subscribe"
            )
        modern = client.protocol_version == MODERN
        waited = time.monotonic()
        if modern:
            await self._listen(client)
        else:
            await self._call("subscribe", SUBSCRIBE_REFUSED, client.subscribe_resource(self.uri))
            emit("subscribed", method="resources/subscribe")
            with anyio.move_on_after(self.timeout):
                await self.updated.wait()
            if not self.updated.is_set():
                raise ProbeFailed(
                    NO_NOTIFICATION,
                    "notification",
                    f"no notifications/resources/updated within {self.timeout}s",
                )
        emit("notification_received", uri=self.uri, after_s=round(time.monotonic() - waited, 3))
        final = await self._call("read", NOT_FOUND, client.read_resource(self.uri))
        emit("final_content", text=_text(final), changed=_text(final) != _text(first))
        if not modern:
            await self._call("unsubscribe", PROTOCOL_ERROR, client.unsubscribe_resource(self.uri))
            emit("unsubscribed")

    async def _listen(self, client: Client) -> None:
        try:
            with anyio.move_on_after(self.timeout) as scope:
                async with client.listen(resource_subscriptions=[self.uri]) as subscription:
                    emit(
                        "subscribed",
                        method="subscriptions/listen",
                        honored=subscription.honored.resource_subscriptions,
                    )
                    async for update in subscription:
                        if getattr(update, "uri", None) == self.uri:
                            return
        except MCPError as exc:
            raise ProbeFailed(SUBSCRIBE_REFUSED, "subscribe", _reason(exc)) from exc
        if scope.cancelled_caught:
            raise ProbeFailed(
                NO_NOTIFICATION,
                "notification",
                f"no notifications/resources/updated within {self.timeout}s",
            )
        raise ProbeFailed(PROTOCOL_ERROR, "notification", "the listen stream ended without it")

    async def _call(self, step: str, code: int, call: Any) -> Any:
        try:
            return await call
        except MCPError as exc:
            raise ProbeFailed(code, step, _reason(exc)) from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise ProbeFailed(UNREACHABLE, step, _reason(exc)) from exc


def _failure_in(exc: BaseException) -> ProbeFailed | None:
    if isinstance(exc, ProbeFailed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _failure_in(inner)) is not None:
                return found
    if isinstance(exc, (httpx2.HTTPError, OSError)):
        return ProbeFailed(UNREACHABLE, "connect", _reason(exc))
    return None


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"JSON-RPC error {exc.error.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}"


def main(url: str, uri: str, timeout: float, protocol: str, token: str | None) -> int:
    """Run the probe; returns the exit code."""
    import warnings

    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    try:
        return anyio.run(Probe(url, uri, timeout, protocol, token).run)
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
