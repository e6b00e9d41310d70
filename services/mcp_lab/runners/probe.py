"""``mcp-lab probe``: the ideal subscription flow against any MCP server, step by step.

connect (initialize, or server/discover at 2026-07-28) -> list -> read ->
subscribe (or subscriptions/listen) -> wait for notifications/resources/updated
-> read again -> unsubscribe (or close the listen stream). Over Streamable HTTP,
or over the legacy SSE transport with ``--transport sse``. One JSON object per
line on stdout per step (``STEPS``), and an exit code that names the first failure:

    0  the whole flow worked
    3  server unreachable, or the connection/handshake failed (the message says
       why when the HTTP answer tells: a token wanted, no MCP endpoint at that
       path, a legacy SSE endpoint)
    4  resource not found (not listed, or the read failed)
    5  subscribe refused (no resources.subscribe capability, or an error)
    6  no notification within --timeout
    7  another protocol error

As a library (:class:`Probe`), the same flow also runs over stdio (a server command,
``stdio=``), hands its steps to ``on_step`` instead of stdout and its progress to
``say`` instead of stderr, and with ``insist`` subscribes even when the server does
not advertise ``resources.subscribe`` (the bridges runner asks whether a subscribe
gets through a bridge that rewrote the capabilities).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
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
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import ADD, Action, Scenario

OK, UNREACHABLE, NOT_FOUND, SUBSCRIBE_REFUSED, NO_NOTIFICATION, PROTOCOL_ERROR = 0, 3, 4, 5, 6, 7
UPDATED, LIST_CHANGED = protocol.UPDATED, protocol.LIST_CHANGED
# How long past the timeline's last step the probe watches for a notification that
# should not come (after an unsubscribe).
_QUIET_MARGIN_SECONDS = 2.0
MODERN = protocol.MODERN
# "modern" negotiates like "auto" (server/discover first) but insists on 2026-07-28.
MODES = {"legacy": "legacy", "modern": "auto", "auto": "auto"}
CLIENT = mcp_types.Implementation(name="mcp-lab-probe", version="1")
LAB_NAME = "mcp-subscribe-lab"  # the lab's serverInfo name
TRANSPORTS = ("http", "sse")  # the command's; the library also takes "stdio"
# Every step line, in order, of a run that works (then a "summary" line).
STEPS = (
    "capabilities",
    "resource",
    "initial_content",
    "subscribed",
    "notification_received",
    "final_content",
    "unsubscribed",
)
_DIAGNOSE_SECONDS = 5.0
# What an MCP server answers a request with (its errors included).
_JSON_RPC_TYPES = ("application/json", "text/event-stream")


class HttpAnswer(NamedTuple):
    method: str
    status: int
    content_type: str


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


# While the probe waits for the notification: a line on stderr at once and then every
# so often, so that a long --timeout is never silent (stdout stays JSON lines only).
PROGRESS_SECONDS = 10.0


def progress(text: str) -> None:
    print(f"mcp-lab probe: {text}", file=sys.stderr, flush=True)


@asynccontextmanager
async def waiting(
    what: str,
    timeout: float,
    every: float = PROGRESS_SECONDS,
    say: Callable[[str], None] = progress,
) -> AsyncIterator[None]:
    """Say that the probe waits for ``what`` (at most ``timeout`` s), and every ``every``
    seconds how long it has waited, until the block ends."""
    started = time.monotonic()
    say(f"waiting for {what} (up to {timeout:g} s)")

    async def tick() -> None:
        while True:
            await anyio.sleep(every)
            say(f"still waiting for {what} ({time.monotonic() - started:.0f} s)")

    async with anyio.create_task_group() as ticking:
        ticking.start_soon(tick)
        try:
            yield
        finally:
            ticking.cancel_scope.cancel()


def _text(result: mcp_types.ReadResourceResult) -> str:
    return "\n".join(getattr(c, "text", "") or "" for c in result.contents)


Step = Callable[..., None]  # (step name, **fields), like :func:`emit`


class Probe:
    """One run of the flow; ``run`` returns the exit code. ``transport`` "stdio" runs
    the server command ``stdio`` (its stderr to ``errlog``) instead of reaching ``url``;
    ``on_step`` and ``say`` take the step lines and the progress lines (stdout and
    stderr by default); ``insist``: subscribe even without ``resources.subscribe``;
    ``prefix``: the server serves ``uri`` (and the scenario's other resources) as
    ``prefix + uri`` (a gateway that namespaces the resources of its servers);
    ``keep_going``: a notification that does not come ends the wait, not the flow (it
    unsubscribes, then fails with exit code 6 all the same)."""

    def __init__(
        self,
        url: str,
        uri: str,
        timeout: float,
        protocol: str,
        token: str | None,
        transport: str = "http",
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
        if transport == "stdio" and stdio is None:
            raise ValueError("the stdio transport needs the server's command (stdio=)")
        self.url, self.timeout, self.protocol = url, timeout, protocol
        # The scenario's URI, and the URI the server serves it as (``prefix``: a gateway
        # that namespaces the resources of the servers behind it).
        self.lab_uri, self.uri, self.prefix = uri, prefix + uri, prefix
        self.transport = transport
        self.stdio, self.errlog = stdio, errlog
        self.emit, self.say, self.insist = on_step, say, insist
        self.keep_going = keep_going
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        # What the lab is expected to do after the subscribe (the scenario's timeline).
        self.scenario = scenario or registry.get(registry.DEFAULT)
        # Notifications as they arrive: (method, uri), from the session or a listen.
        self._sent, self._arrived = anyio.create_memory_object_stream[tuple[str, str | None]](100)
        self._listening = False
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

    async def run(self) -> int:
        started = time.monotonic()
        try:
            await self._connected_flow()
        except BaseException as exc:  # anyio may wrap the failure in an exception group
            failure = _failure_in(exc)
            if failure is None:
                raise
            self.emit(
                "summary",
                ok=False,
                exit_code=failure.code,
                failed_step=failure.step,
                message=failure.message,
                seconds=round(time.monotonic() - started, 3),
            )
            return failure.code
        self.emit("summary", ok=True, exit_code=OK, seconds=round(time.monotonic() - started, 3))
        return OK

    async def _connected_flow(self) -> None:
        async with AsyncExitStack() as stack:
            if self.transport == "sse":
                transport: Any = sse_client(self.url, httpx_client_factory=self._http_client)
            elif self.transport == "stdio":
                assert self.stdio is not None
                transport = stdio_client(self.stdio, errlog=self.errlog or sys.stderr)
            else:
                http = await stack.enter_async_context(self._http_client())
                transport = streamable_http_client(self.url, http_client=http)
            client = Client(
                transport,
                mode="legacy" if self.transport == "sse" else MODES[self.protocol],
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
        if self.transport == "http" and self.answers and await self._is_legacy_sse():
            return (
                f"{where} is a legacy SSE endpoint, not Streamable HTTP: "
                "run the probe with --transport sse (or point it at the Streamable HTTP path)"
            )
        if answer is not None and answer.status in (404, 405):
            sse = self.transport == "sse"
            kind, path = ("legacy SSE", "/sse") if sse else ("Streamable HTTP", "/mcp")
            return (
                f"no MCP endpoint at {where} (HTTP {answer.status} to {answer.method}): "
                f"check the path of the server's {kind} endpoint (the lab's is {path})"
            )
        if answer is not None and self.transport == "sse":
            return (
                f"{where} is not a legacy SSE endpoint (HTTP {answer.status} to "
                f"{answer.method}): for a Streamable HTTP endpoint, leave out --transport sse"
            )
        if answer is None and self.answers and self.transport == "http":
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
            return f"{_reason(exc)} (HTTP {answer.status} to {answer.method} at {where})"
        return _reason(exc)

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
        if self.protocol == "modern" and client.protocol_version != MODERN:
            raise ProbeFailed(
                PROTOCOL_ERROR,
                "connect",
                f"the server negotiated {client.protocol_version}, not {MODERN}",
            )
        caps = client.server_capabilities
        resources = caps.resources if caps is not None else None
        info = client.server_info
        self.emit(
            "capabilities",
            protocol=client.protocol_version,
            transport={"sse": "sse", "stdio": "stdio"}.get(self.transport, "streamable-http"),
            server=info.model_dump(exclude_none=True) if info else None,
            resources=resources.model_dump(exclude_none=True) if resources else None,
        )
        await self._find(client)
        first = await self._call("read", NOT_FOUND, client.read_resource(self.uri))
        self._initial(client, _text(first))
        if (resources is None or not resources.subscribe) and not self.insist:
            raise ProbeFailed(
                SUBSCRIBE_REFUSED, "subscribe", "the server does not advertise resources.subscribe"
            )
        modern = client.protocol_version == MODERN
        subscribed = True
        async with AsyncExitStack() as listening:
            waited = time.monotonic()
            if modern:
                await self._listen(client, listening)
            else:
                await self._call(
                    "subscribe", SUBSCRIBE_REFUSED, client.subscribe_resource(self.uri)
                )
                self.emit("subscribed", method=protocol.SUBSCRIBE)
            updates = 0
            missed: ProbeFailed | None = None
            for step in self._plan():
                try:
                    if step.kind == ADD:
                        await self._new_resource(client, step)
                        continue
                    await self._next(UPDATED, "notification")
                except ProbeFailed as exc:
                    if not self.keep_going or exc.code != NO_NOTIFICATION:
                        raise
                    missed = exc  # unsubscribe all the same, then fail with it
                    break
                updates += 1
                after = round(time.monotonic() - waited, 3)
                self.emit("notification_received", uri=self.uri, n=updates, after_s=after)
                final = await self._call("read", NOT_FOUND, client.read_resource(self.uri))
                changed = _text(final) != _text(first)
                self.emit("final_content", n=updates, text=_text(final), changed=changed)
                if updates == self.scenario.play.unsubscribe_after:
                    await self._unsubscribe(client, modern, listening)
                    subscribed = False
                    await self._stays_quiet()
                    break
        if subscribed:  # leaving the stack above closed a listen stream
            await self._unsubscribe(client, modern, None)
        if missed is not None:
            raise missed

    def _initial(self, client: Client, text: str) -> None:
        """The ``initial_content`` step; against the lab, its version too, and when that
        is not 1, why (a state left by an earlier run) and how to start over."""
        info = client.server_info
        version = _lab_version(text) if info is not None and info.name == LAB_NAME else None
        if version is None or version == 1:
            self.emit("initial_content", text=text, **({} if version is None else {"version": 1}))
            return
        note = _not_first_note(version, client.protocol_version == MODERN)
        self.emit("initial_content", text=text, version=version, note=note)
        self.say(note)

    def _plan(self) -> list[Action]:
        """What the lab will do after the subscribe, in order: the scenario's timeline
        (one update when the probed URI does not start it)."""
        if not self.scenario.starts_timeline(self.lab_uri):
            return [Action()]
        return sorted(self.scenario.timeline, key=lambda action: action.after)

    async def _find(self, client: Client) -> None:
        """List the resources (or, for a template's resource, the templates) and find
        the one to probe there."""
        templates = self.scenario.catalog.templates
        if self.lab_uri in self.scenario.catalog.uris() or not templates:
            listed = await self._call("list", NOT_FOUND, client.list_resources())
            uris = [str(r.uri) for r in listed.resources]
            if self.uri not in uris:
                raise ProbeFailed(NOT_FOUND, "resource", f"{self.uri} not in resources/list {uris}")
            self.emit("resource", uri=self.uri, found=True)
            return
        found = await self._call("list", NOT_FOUND, client.list_resource_templates())
        shapes = [str(t.uri_template) for t in found.resource_templates]
        match = next((t for t in templates if t.uri_template in shapes), None)
        if match is None or match.match(self.lab_uri) is None:
            message = f"{self.uri} fits no template of resources/templates/list {shapes}"
            raise ProbeFailed(NOT_FOUND, "resource", message)
        self.emit("resource", uri=self.uri, found=True, template=match.uri_template)

    async def _next(self, method: str, step: str) -> None:
        """Wait (at most --timeout) for the next notification ``method`` (about the
        probed URI, for an update)."""
        async with waiting(method, self.timeout, say=self.say):
            with anyio.move_on_after(self.timeout):
                async for got, uri in self._arrived:
                    if got == method and (method != UPDATED or uri == self.uri):
                        return
        raise ProbeFailed(NO_NOTIFICATION, step, f"no {method} within {self.timeout}s")

    async def _new_resource(self, client: Client, step: Action) -> None:
        """A resource is added: wait for list_changed, list again, find and read it."""
        await self._next(LIST_CHANGED, "list_changed")
        self.emit("list_changed")
        listed = await self._call("list", NOT_FOUND, client.list_resources())
        uris = [str(r.uri) for r in listed.resources]
        served = self.prefix + str(step.uri)
        if served not in uris:
            raise ProbeFailed(NOT_FOUND, "new_resource", f"{served} not in resources/list {uris}")
        added = await self._call("read", NOT_FOUND, client.read_resource(served))
        self.emit("new_resource", uri=served, text=_text(added))

    async def _unsubscribe(
        self, client: Client, modern: bool, listening: AsyncExitStack | None
    ) -> None:
        """Unsubscribe (2026-07-28: close the listen stream, if ``listening`` still holds it)."""
        if modern:
            if listening is not None:
                await listening.aclose()
            self.emit("unsubscribed", method="subscriptions/listen stream closed")
        else:
            await self._call("unsubscribe", PROTOCOL_ERROR, client.unsubscribe_resource(self.uri))
            self.emit("unsubscribed", method=protocol.UNSUBSCRIBE)

    async def _stays_quiet(self) -> None:
        """After an unsubscribe, the rest of the timeline must notify nothing: watched
        until its last step is due, plus a margin."""
        rest = max(a.after for a in self.scenario.timeline) + _QUIET_MARGIN_SECONDS
        with anyio.move_on_after(rest):
            async for got, uri in self._arrived:
                if got == UPDATED and uri == self.uri:
                    message = "a notification arrived after the unsubscribe"
                    raise ProbeFailed(PROTOCOL_ERROR, "quiet", message)
        self.emit("quiet_after_unsubscribe", watched_s=rest)

    async def _listen(self, client: Client, stack: AsyncExitStack) -> None:
        """Open a listen naming the URI (kept open by ``stack``); its events feed the
        notifications the flow waits for."""
        wants_list = any(a.kind == ADD for a in self._plan())
        try:
            subscription = await stack.enter_async_context(
                client.listen(resource_subscriptions=[self.uri], resources_list_changed=wants_list)
            )
        except MCPError as exc:
            raise ProbeFailed(SUBSCRIBE_REFUSED, "subscribe", _reason(exc)) from exc
        self.emit(
            "subscribed",
            method=protocol.LISTEN,
            honored=subscription.honored.resource_subscriptions,
        )
        self._listening = True
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)

        async def feed() -> None:
            async for change in subscription:
                uri = getattr(change, "uri", None)
                await self._sent.send((UPDATED if uri is not None else LIST_CHANGED, uri))

        tasks.start_soon(feed)

    async def _call(self, step: str, code: int, call: Any) -> Any:
        try:
            return await call
        except MCPError as exc:
            raise ProbeFailed(code, step, _reason(exc)) from exc
        except (httpx2.HTTPError, OSError) as exc:
            raise ProbeFailed(UNREACHABLE, step, _reason(exc)) from exc


def _lab_version(text: str) -> int | None:
    """The version a lab resource's text states (its ``version: N`` line)."""
    found = re.search(r"^version: (\d+)$", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def _not_first_note(version: int, modern: bool) -> str:
    """Why the lab's first read gave ``version`` (not 1), and how to start over."""
    if modern:
        why = (
            f"at {MODERN} the lab keeps a client's state from one run to the next (one per "
            f"client name and version, here {CLIENT.name}/{CLIENT.version}, not per "
            "session), and an earlier probe's update left it there"
        )
    else:
        why = (
            "this session's state is not new: the lab keeps one state for every session "
            "(MCP_TEST_STATE_SCOPE=shared), and earlier updates moved it on"
        )
    return (
        f"the first read is version {version}, not 1: {why}. The flow works all the same "
        "(it waits for the next version); `mcp-lab reset` puts every state back to version 1."
    )


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


def main(
    url: str,
    uri: str | None,
    timeout: float,
    protocol: str,
    token: str | None,
    transport: str = "http",
    scenario: str | None = None,
) -> int:
    """Run the probe; returns the exit code."""
    import warnings

    if transport == "sse" and protocol == "modern":
        print(
            "mcp-lab probe: 2026-07-28 has no legacy SSE transport; "
            "use --protocol legacy or auto with --transport sse",
            file=sys.stderr,
        )
        return 2
    try:
        played = registry.get(scenario or registry.DEFAULT)
    except LookupError as exc:
        print(f"mcp-lab probe: {exc}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    probe = Probe(url, uri or played.read_uri, timeout, protocol, token, transport, played)
    try:
        return anyio.run(probe.run)
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
