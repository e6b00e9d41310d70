"""The lab's one ASGI layer (services/mcp_lab/server/asgi.py): which requests it hands to the
app untouched, and which go through a concern first. What each concern does is
tested where it matters (test_security, test_lifecycle, test_resume*, test_evidence*)."""

from __future__ import annotations

import pytest
from starlette.types import Message, Receive, Scope, Send

from mcp_lab.server.asgi import FrontDoor
from mcp_lab.server.guard import Security
from mcp_lab.server.lifecycle import SessionCap
from mcp_lab.server.resume.get_streams import StreamLog, plain
from mcp_lab.server.sessions import SessionRegistry
from mcp_lab.settings import LabSettings

pytestmark = pytest.mark.anyio


class RecordingApp:
    """Answers 200 and remembers the ``send`` and ``receive`` it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[Scope, Receive, Send]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls.append((scope, receive, send))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def front_door(app: RecordingApp, secured: bool) -> FrontDoor:
    door = FrontDoor(
        app,
        path="/mcp",
        streams=StreamLog(plain(app), SessionRegistry()),
        cap=SessionCap(app, max_sessions=10, retry_after=1),
    )
    settings = LabSettings(_env_file=None, _env_prefix="MCP_LAB_ASGI_UNUSED_")  # type: ignore[call-arg]
    return door.secured(Security.of(settings)) if secured else door


def request(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> Scope:
    base = [(b"host", b"127.0.0.1:8089")]
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": base + headers,
        "query_string": b"",
        "server": ("127.0.0.1", 8089),
    }


async def drive(door: FrontDoor, scope: Scope) -> tuple[Send, Receive, list[Message]]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await door(scope, receive, send)
    return send, receive, sent


SESSION = [(b"mcp-session-id", b"abc"), (b"content-length", b"2")]


@pytest.mark.parametrize("secured", [False, True])
@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("POST", "/mcp", SESSION),
        ("DELETE", "/mcp", [(b"mcp-session-id", b"abc")]),
        ("GET", "/api/report", []),
        ("POST", "/sse/messages/", [(b"content-length", b"2")]),
    ],
)
async def test_a_request_no_concern_needs_reaches_the_app_with_the_servers_send(
    method: str, path: str, headers: list[tuple[bytes, bytes]], secured: bool
) -> None:
    app = RecordingApp()
    send, receive, sent = await drive(front_door(app, secured), request(method, path, headers))
    [(_, app_receive, app_send)] = app.calls
    assert app_send is send  # nothing wraps what the app sends
    # Unsecured, nothing wraps what it receives either; secured, the body was read first.
    assert (app_receive is receive) is not secured
    assert sent[0]["status"] == 200


@pytest.mark.parametrize(
    ("method", "headers"),
    [("GET", [(b"mcp-session-id", b"abc")]), ("POST", [(b"content-length", b"2")])],
)
async def test_a_stream_or_a_session_opening_post_goes_through_its_concern(
    method: str, headers: list[tuple[bytes, bytes]]
) -> None:
    app = RecordingApp()
    send, _, sent = await drive(front_door(app, False), request(method, "/mcp/", headers))
    [(_, _, app_send)] = app.calls
    assert app_send is not send  # the stream log or the session cap watches the response
    assert sent[0]["status"] == 200


async def test_a_refused_host_never_reaches_the_app() -> None:
    app = RecordingApp()
    scope = request("POST", "/mcp", SESSION)
    scope["headers"] = [(b"host", b"evil.example"), *SESSION]
    _, _, sent = await drive(front_door(app, True), scope)
    assert app.calls == []
    assert sent[0]["status"] == 421
    assert (b"connection", b"close") in sent[0]["headers"]  # its body was announced, not read


async def test_a_stream_with_two_session_headers_is_the_first_ones_as_for_the_sdk() -> None:
    """The SDK (through Starlette) serves a GET with two ``Mcp-Session-Id`` headers as
    the first one's stream; the layer must log it as that session's too."""
    app = RecordingApp()
    seen: list[tuple[str, str]] = []

    async def stream(scope: Scope, receive: Receive, send: Send, session: str, last: str) -> None:
        seen.append((session, last))
        await app(scope, receive, send)

    door = FrontDoor(
        app,
        path="/mcp",
        streams=StreamLog(stream, SessionRegistry()),
        cap=SessionCap(app, max_sessions=10, retry_after=1),
    )
    headers = [(b"mcp-session-id", b"first"), (b"mcp-session-id", b"second")]
    await drive(door, request("GET", "/mcp", [*headers, (b"last-event-id", b"e1")]))
    assert seen == [("first", "e1")]
