"""A wire tap: a reverse proxy on loopback between one client and the lab.

The clients runner points a CLI at the tap instead of at the lab. The tap passes every
byte through unchanged (requests, JSON answers, SSE streams as they flow) and keeps
each JSON-RPC message it sees, each way, with the time it passed. That record is
independent of the lab's own evidence: :func:`checklist` fills the lab's checklist
from it alone, and the runner compares the two, so a matrix cell is checked against
what was on the wire.

The bridges runner (:mod:`mcp_lab.runners.bridges`) puts a tap on each side of a bridge ("lab"
is then the server end of that wire: the bridge itself, on the client's side), and for
its resumption run cuts the GET streams passing the tap and holds new ones
(:meth:`WireTap.cut_streams`), to see whether the bridge resumes with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from mcp_lab import protocol
from mcp_lab.catalog import versions_in
from mcp_lab.runners import embedded

logger = logging.getLogger("mcp_lab.wire")

CLIENT, LAB = "client", "lab"  # who sent a message
# Headers that belong to one connection, not to the message (RFC 9110 7.6.1), and
# the ones the tap sets itself.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "content-length",
    }
)
HOLD_SECONDS = 30.0  # a GET held by WireTap.cut_streams waits at most this long


@dataclass(frozen=True)
class WireMessage:
    """One JSON-RPC message as it passed the tap."""

    at_ms: int
    sender: str  # CLIENT or LAB
    exchange: int  # the HTTP request it belongs to (its request, or its answer/stream)
    http: str  # "POST /mcp", "GET /mcp", ...
    status: int | None  # the HTTP status of a lab message's answer
    session: str | None  # the Mcp-Session-Id of the HTTP request
    method: str | None  # requests and notifications
    id: str | None  # requests and responses (as text)
    uri: str | None  # params.uri, or the uri of a read result's contents
    version: int | None  # the resource version in a read result
    error: int | None  # a response's error code
    # The protocol version an initialize asks for, or its answer (or a discover's) names.
    protocol: str | None = None
    # The resources capability an initialize (or discover) answer advertises.
    resources: dict[str, Any] | None = None
    # The Last-Event-ID header of the HTTP request (on its answer's status message).
    last_event_id: str | None = None


def _uri_of(params: dict[str, Any]) -> str | None:
    """``params.uri``, or the first resource a 2026-07-28 listen asks for."""
    if isinstance(params.get("uri"), str):
        return str(params["uri"])
    asked = params.get("notifications")
    wanted = asked.get("resourceSubscriptions") if isinstance(asked, dict) else None
    if isinstance(wanted, list) and wanted and isinstance(wanted[0], str):
        return wanted[0]
    return None


def _now_ms() -> int:
    return int(time.time() * 1000)


def messages_in(
    payload: Any, sender: str, exchange: int, http: str, status: int | None, session: str | None
) -> list[WireMessage]:
    items = payload if isinstance(payload, list) else [payload]
    out = []
    now = _now_ms()
    for item in items:
        if not isinstance(item, dict):
            continue
        params = item.get("params")
        params = params if isinstance(params, dict) else {}
        uri = _uri_of(params)
        version = None
        result = item.get("result")
        if isinstance(result, dict) and isinstance(result.get("contents"), list):
            for content in result["contents"]:
                if isinstance(content, dict) and isinstance(content.get("uri"), str):
                    uri = uri or content["uri"]
                    found = versions_in(str(content.get("text", "")))
                    version = version if version is not None else (found[0] if found else None)
        error = item.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        method = item.get("method") if isinstance(item.get("method"), str) else None
        raw_id = item.get("id")
        protocol, resources = _handshake(params, result)
        out.append(
            WireMessage(
                now,
                sender,
                exchange,
                http,
                status,
                session,
                method,
                None if raw_id is None else str(raw_id),
                uri,
                version,
                code if isinstance(code, int) else None,
                protocol,
                resources,
            )
        )
    return out


def _handshake(params: dict[str, Any], result: Any) -> tuple[str | None, dict[str, Any] | None]:
    """The protocol version an initialize asks for or its answer names (a discover
    answer: the first of its versions), and the resources capability an answer gives."""
    if isinstance(params.get("protocolVersion"), str):
        return str(params["protocolVersion"]), None
    if not isinstance(result, dict):
        return None, None
    protocol = result.get("protocolVersion")
    if not isinstance(protocol, str):
        versions = result.get("supportedVersions")
        protocol = versions[0] if isinstance(versions, list) and versions else None
    capabilities = result.get("capabilities")
    resources = capabilities.get("resources") if isinstance(capabilities, dict) else None
    return (
        protocol if isinstance(protocol, str) else None,
        dict(resources) if isinstance(resources, dict) else None,
    )


def _retrieved(future: asyncio.Future[Any]) -> None:
    """A done callback: the future's exception counts as seen (it is raised where the
    future is awaited, when it is)."""
    if not future.cancelled():
        future.exception()


class _SseReader:
    """Splits an SSE byte stream into events as it passes, and parses their data."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Any]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        payloads = []
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            data = [
                line[5:].removeprefix(b" ")
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            ]
            if not data:
                continue
            try:
                payloads.append(json.loads(b"\n".join(data)))
            except ValueError:
                continue
        return payloads


class WireTap:
    """The tap in front of ``upstream`` (the lab's base URL, ``http://127.0.0.1:PORT``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.messages: list[WireMessage] = []
        self._exchanges = 0
        self._streams: dict[int, asyncio.Event] = {}  # open GET streams: their cut
        self._hold: asyncio.Event | None = None  # set: new GETs pass again

    def cut_streams(self, hold: asyncio.Event) -> int:
        """End every GET stream open through the tap now, and hold each new GET until
        ``hold`` is set (at most :data:`HOLD_SECONDS`); returns how many it cut."""
        self._hold = hold
        for cut in self._streams.values():
            cut.set()
        return len(self._streams)

    def _keep(self, messages: Iterable[WireMessage]) -> None:
        self.messages.extend(messages)

    async def _forward(self, request: Request) -> Response:
        self._exchanges += 1
        exchange = self._exchanges
        hold = self._hold
        if request.method == "GET" and hold is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hold.wait(), HOLD_SECONDS)
        body = await request.body()
        http = f"{request.method} {request.url.path}"
        session = request.headers.get("mcp-session-id")
        sent: list[WireMessage] = []
        if body:
            try:
                sent = messages_in(json.loads(body), CLIENT, exchange, http, None, session)
            except ValueError:
                pass
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        url = self.upstream + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        client: httpx2.AsyncClient = request.app.state.client
        outgoing = client.build_request(request.method, url, headers=headers, content=body)
        try:
            answer = await client.send(outgoing, stream=True)
        except httpx2.HTTPError as exc:
            self._keep(sent)
            logger.warning("[wire] %s: the lab did not answer: %s", http, exc)
            return Response(f"wire tap: the lab did not answer: {exc}\n", status_code=502)
        if session is None and answer.headers.get("mcp-session-id"):
            # A session's id comes in the answer to its initialize: the request is its too.
            session = answer.headers["mcp-session-id"]
            sent = [replace(m, session=session) for m in sent]
        self._keep(sent)
        # The answer itself (its status), before any message it carries.
        self._keep([WireMessage(_now_ms(), LAB, exchange, http, answer.status_code, session,
                                None, None, None, None, None,
                                last_event_id=request.headers.get("last-event-id"))])  # fmt: skip
        raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in answer.headers.multi_items()
            if k.lower() not in _HOP
        ]
        kind = answer.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            content = await answer.aread()
            await answer.aclose()
            if content and kind.startswith("application/json"):
                try:
                    payload = json.loads(content)
                except ValueError:
                    payload = None
                self._keep(messages_in(payload, LAB, exchange, http, answer.status_code, session))
            response = Response(content, status_code=answer.status_code)
            response.raw_headers = [
                *raw_headers,
                (b"content-length", str(len(content)).encode()),
            ]
            return response

        cut = asyncio.Event()
        if request.method == "GET":
            self._streams[exchange] = cut

        async def stream() -> AsyncIterator[bytes]:
            reader = _SseReader()
            chunks = answer.aiter_raw().__aiter__()
            ended = asyncio.ensure_future(cut.wait())
            try:
                while True:
                    step = asyncio.ensure_future(anext(chunks))
                    # Read even when nobody awaits it any more (the client went away).
                    step.add_done_callback(_retrieved)
                    await asyncio.wait({step, ended}, return_when=asyncio.FIRST_COMPLETED)
                    if not step.done():  # cut: the stream ends here
                        step.cancel()
                        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                            await step
                        return
                    try:
                        chunk = step.result()
                    except StopAsyncIteration:
                        return
                    except httpx2.HTTPError as exc:  # the lab went away mid-stream
                        logger.info("[wire] %s: the lab's stream broke off: %s", http, exc)
                        return
                    for payload in reader.feed(chunk):
                        self._keep(
                            messages_in(payload, LAB, exchange, http, answer.status_code, session)
                        )
                    yield chunk
            finally:
                ended.cancel()
                self._streams.pop(exchange, None)

        response = StreamingResponse(
            stream(), status_code=answer.status_code, background=BackgroundTask(answer.aclose)
        )
        response.raw_headers = raw_headers
        return response

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        """Serve the tap on a free loopback port for the duration; yields its base URL."""
        methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=methods)])
        timeout = httpx2.Timeout(10.0, read=None)  # a GET stream is quiet for long
        async with httpx2.AsyncClient(timeout=timeout) as client:
            app.state.client = client
            async with embedded.serve(app) as url:
                yield url


def to_jsonl(messages: Iterable[WireMessage]) -> str:
    """The capture, one message a line (a run folder's ``wire.jsonl``)."""
    return "".join(json.dumps(asdict(m)) + "\n" for m in messages)


def from_jsonl(text: str) -> list[WireMessage]:
    """A capture written by :func:`to_jsonl` (a stdio tap's file), read back."""
    return [WireMessage(**json.loads(line)) for line in text.splitlines() if line]


def checklists(
    messages: list[WireMessage], uri: str, same: Callable[[str], bool] | None = None
) -> dict[str | None, dict[str, int | None]]:
    """:func:`checklist` of each session on the wire (by ``Mcp-Session-Id``; None holds
    the messages sent without one: initialize, and every 2026-07-28 request)."""
    sessions: dict[str | None, list[WireMessage]] = {}
    for message in messages:
        sessions.setdefault(message.session, []).append(message)
    return {session: checklist(group, uri, same) for session, group in sessions.items()}


def checklist(
    messages: list[WireMessage], uri: str, same: Callable[[str], bool] | None = None
) -> dict[str, int | None]:
    """The checkpoints the wire shows, each the time it first passed (or None): what a
    client was answered, not what it asked (a refused subscribe is not a subscribe).
    ``same``: whether a URI is the watched resource (default: it is ``uri``; a template
    scenario's: any resource of the template, as the lab scores it).

    Keys are those of :data:`mcp_lab.evidence.levels.CHECKPOINTS`.
    """
    requests: dict[tuple[int, str | None], WireMessage] = {
        (m.exchange, m.id): m
        for m in messages
        if m.sender == CLIENT and m.method is not None and m.id is not None
    }
    marks: dict[str, int | None] = dict.fromkeys(
        ("connected", "discovered", "read_initial", "subscribed", "notified", "re_read")
    )
    ours = same or (lambda other: other == uri)

    def watched(other: str | None) -> bool:
        return other is not None and ours(other)

    def mark(name: str, at: int) -> None:
        marks[name] = marks[name] or at

    for message in messages:
        if message.sender == CLIENT:
            # A listen is answered with a stream that stays open: its request, once
            # the lab answered it with 200 (over HTTP) or acknowledged it naming the
            # resource (over stdio, where nothing has a status), is the subscribe.
            if message.method == protocol.LISTEN and watched(message.uri):
                answered = any(
                    m.sender == LAB
                    and m.at_ms >= message.at_ms
                    and (
                        (m.exchange == message.exchange and m.status == 200)
                        or (m.method == protocol.LISTEN_ACKNOWLEDGED and watched(m.uri))
                    )
                    for m in messages
                )
                if answered:
                    mark("subscribed", message.at_ms)
            continue
        if message.method == protocol.UPDATED and watched(message.uri) and marks["subscribed"]:
            mark("notified", message.at_ms)
            continue
        asked = requests.get((message.exchange, message.id))
        if asked is None or message.error is not None or message.method is not None:
            continue
        if asked.method in protocol.CONNECT_METHODS:
            mark("connected", message.at_ms)
        elif asked.method == protocol.LIST:
            mark("discovered", message.at_ms)
        elif asked.method == protocol.SUBSCRIBE and watched(asked.uri):
            mark("subscribed", message.at_ms)
        elif asked.method == protocol.READ and watched(asked.uri):
            if marks["notified"] is None:
                mark("read_initial", message.at_ms)
            elif (message.version or 0) >= 2:
                mark("re_read", message.at_ms)
    return marks
