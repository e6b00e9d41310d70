"""Who may talk to the server, and what hostile input gets: a clear 4xx, never a 5xx or a hang.

The HTTP-level checks drive the guarded app in memory (tests/support/inproc.py); what depends
on uvicorn's socket handling (an endless chunked body, a Content-Length that lies) and
the ``mcp-lab probe`` command run a real server process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from mcp_lab import protocol
from mcp_lab.server.asgi import FrontDoor
from mcp_lab.server.guard import BodyGate, Security
from mcp_lab.server.lifecycle import SessionCap
from mcp_lab.server.resume.get_streams import StreamLog, plain
from mcp_lab.server.sessions import SessionRegistry
from tests.support.http_calls import HEADERS, aget, apost, client_of
from tests.support.lab import STATUS_URI, RawSession, connect, version_of

pytestmark = pytest.mark.anyio

INIT = protocol.initialize_request("guard-test", "0")


async def test_origin_from_another_site_gets_403_and_the_servers_own_origins_pass(inproc) -> None:
    _, url = await inproc.server()
    port = urlsplit(url).port
    assert (await apost(url, INIT, Origin="https://evil.example")).status_code == 403
    sse = url.removesuffix("/mcp") + "/sse"
    assert (await aget(sse, Origin="https://evil.example")).status_code == 403
    # Another program on this machine (another port) is another site too.
    assert (await apost(url, INIT, Origin="http://localhost:3000")).status_code == 403
    assert (await apost(url, INIT, Origin=f"http://localhost:{port}")).status_code == 200
    assert (await apost(url, INIT, Origin=f"http://127.0.0.1:{port}")).status_code == 200
    assert (await apost(url, INIT, Origin=f"http://[::1]:{port}")).status_code == 200
    assert (await apost(url, INIT)).status_code == 200  # no Origin: not a browser
    # The scheme counts too: the lab serves http, and an https page is another site.
    assert (await apost(url, INIT, Origin=f"https://localhost:{port}")).status_code == 403
    assert (await apost(url, INIT, Origin=f"https://127.0.0.1:{port}")).status_code == 403


async def test_a_foreign_host_header_gets_421_and_allow_lists_open_it(inproc) -> None:
    _, url = await inproc.server(
        allowed_hosts="lab.internal,localhost:9000", allowed_origins="https://ui.example"
    )
    assert (await apost(url, INIT, Host="attacker.example")).status_code == 421
    # An entry without a port: any port (a proxy in front serves the lab on its own).
    assert (await apost(url, INIT, Host="lab.internal")).status_code == 200
    assert (await apost(url, INIT, Host="lab.internal:8443")).status_code == 200
    # An entry with a port (a port forward to the lab): that port only.
    assert (await apost(url, INIT, Host="localhost:9000")).status_code == 200
    assert (await apost(url, INIT, Host="localhost:9001")).status_code == 421
    assert (await apost(url, INIT, Host="lab.internal.attacker.example")).status_code == 421
    assert (await apost(url, INIT, Origin="https://ui.example")).status_code == 200
    assert (await apost(url, INIT, Origin="https://other.example")).status_code == 403
    assert (await apost(url, INIT, Origin="https://ui.example:8443")).status_code == 403


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
        ("LOCALHOST:{port}", 200),
        ("[::1]:{port}", 200),
        # Loopback, but not the port the lab listens on: another program's address.
        ("127.0.0.1:{other}", 421),
        ("localhost:{other}", 421),
        ("[::1]:{other}", 421),
        ("127.0.0.1", 421),  # no port: http's 80
        ("127.0.0.1:{port}.evil.example", 421),
        ("localhost:{port}@evil.example", 421),
        ("127.0.0.1:abc", 421),
        ("127.0.0.1:{port}:1", 421),
        ("[::1", 421),
        ("evil.example:{port}", 421),
        ("", 421),
    ],
)
async def test_host_is_read_as_a_host_and_a_port(inproc, host: str, status: int) -> None:
    _, url = await inproc.server()
    port = urlsplit(url).port
    assert port is not None
    given = host.format(port=port, other=port + 1)
    assert (await apost(url, INIT, Host=given)).status_code == status, given


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:{port}.evil.example",
        "http://localhost:{port}@evil.example",
        "null",
        "http://127.0.0.1:{port}/path",
        "file://",
        "https://localhost:{port}",
        "http://localhost:{other}",
        "http://localhost",
    ],
)
async def test_an_origin_that_only_looks_like_the_servers_gets_403(inproc, origin: str) -> None:
    _, url = await inproc.server()
    port = urlsplit(url).port
    assert port is not None
    given = origin.format(port=port, other=port + 1)
    assert (await apost(url, INIT, Origin=given)).status_code == 403, given


@pytest.mark.parametrize(
    "twice",
    [
        [("Host", "127.0.0.1:{port}"), ("Host", "127.0.0.1:{port}")],
        [("Host", "127.0.0.1:{port}"), ("Host", "evil.example")],
        [("Origin", "http://127.0.0.1:{port}"), ("Origin", "https://evil.example")],
        [("Origin", "https://evil.example"), ("Origin", "http://127.0.0.1:{port}")],
    ],
    ids=["two-hosts-alike", "host-then-evil", "origin-then-evil", "evil-then-origin"],
)
async def test_two_host_or_origin_headers_get_400(inproc, twice: list[tuple[str, str]]) -> None:
    """Which of two values counts depends on who reads them (Starlette and the SDK
    take the first, other servers the last): such a request is refused whole."""
    server, url = await inproc.server()
    port = urlsplit(url).port
    headers = [*HEADERS.items(), *((name, value.format(port=port)) for name, value in twice)]
    async with client_of(url) as client:
        refused = await client.post(url, content=json.dumps(INIT), headers=headers)
    assert refused.status_code == 400
    name = twice[0][0]
    assert refused.json() == {"error": f"more than one {name} header"}
    assert refused.headers["connection"] == "close"  # its body was announced, not read
    await server.await_line(rf"\[guard\] a request with two {name} headers refused \(400\)")
    assert (await apost(url, INIT)).status_code == 200


async def stalled_body(sent: anyio.Event) -> AsyncIterator[bytes]:
    """A chunked body whose first bytes come and the rest never does."""
    yield b'{"jsonrpc": "2.0", '
    sent.set()
    await anyio.Event().wait()  # never set: the rest of the body never comes
    yield b"}"


async def test_a_body_that_does_not_all_come_in_time_gets_408_and_a_closed_connection(
    inproc,
) -> None:
    server, url = await inproc.server(body_timeout_seconds="0.5")
    sent = anyio.Event()
    async with client_of(url) as client:
        with anyio.fail_after(10):
            refused = await client.post(url, content=stalled_body(sent), headers=HEADERS)
    assert sent.is_set()
    assert refused.status_code == 408
    assert refused.json() == {"error": "request body not received within 0.5 s"}
    assert refused.headers["connection"] == "close"
    await server.await_line(
        r"\[guard\] POST /mcp: body not all here 0\.5 s after its head \(19 bytes, "
        r"no Content-Length\): 408, connection closed"
    )
    assert (await apost(url, INIT)).status_code == 200  # a whole body is served as before


async def test_auth_token_is_required_when_set(inproc) -> None:
    _, url = await inproc.server(auth_token="s3cret")
    base = url.removesuffix("/mcp")
    refused = await apost(url, INIT)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert (await apost(url, INIT, Authorization="Bearer wrong")).status_code == 401
    assert (await apost(url, INIT, Authorization="Bearer s3cret")).status_code == 200
    assert (await aget(f"{base}/healthz")).status_code == 200
    assert (await aget(f"{base}/api/report")).status_code == 401
    assert (await aget(f"{base}/api/report", Authorization="Bearer s3cret")).status_code == 200


async def test_a_token_in_the_query_opens_only_the_dashboard_page(inproc) -> None:
    """``?token=`` ends up in browser history and proxy logs: it is taken for the
    page alone, which hands the browser a cookie for the dashboard's own data."""
    _, url = await inproc.server(auth_token="s3cret")
    base = url.removesuffix("/mcp")
    assert (await aget(f"{base}/api/report?token=s3cret")).status_code == 401
    assert (await aget(f"{base}/api/stream?token=s3cret")).status_code == 401
    assert (await apost(f"{url}?token=s3cret", INIT)).status_code == 401
    page = await aget(f"{base}/?token=s3cret")
    assert page.status_code == 200
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "s3cret" not in cookie
    name_value = cookie.split(";", 1)[0]
    assert (await aget(f"{base}/api/report", Cookie=name_value)).status_code == 200
    # A reload: the page took the token out of the address bar; the cookie opens it.
    assert "Path=/;" in cookie or cookie.rstrip().endswith("Path=/"), cookie
    assert (await aget(f"{base}/", Cookie=name_value)).status_code == 200
    assert (await aget(f"{base}/", Cookie="mcp_lab_dashboard=guess")).status_code == 401
    async with (
        client_of(url) as client,
        client.stream("GET", f"{base}/api/stream", headers={"Cookie": name_value}) as stream,
    ):
        assert stream.status_code == 200
    assert (await apost(url, INIT, Cookie=name_value)).status_code == 401  # not for MCP
    assert (await aget(f"{base}/api/report", Cookie="mcp_lab_dashboard=guess")).status_code == 401


async def test_an_oversized_body_gets_413(inproc) -> None:
    server, url = await inproc.server(max_body_bytes="4096")
    huge = {**INIT, "params": {**INIT["params"], "padding": "x" * 10_000}}
    assert (await apost(url, huge)).status_code == 413
    await server.await_line(r"\[guard\] body of \d+ bytes refused")
    assert (await apost(url, INIT)).status_code == 200


class RecordingApp:
    """An ASGI app that reads its whole body, records it and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def drive_guard(
    app: RecordingApp, headers: list[tuple[bytes, bytes]], incoming: list[Message]
) -> tuple[list[Message], int]:
    """One request through the lab's layer with the body checks, in process:
    ``incoming`` is what the server's ``receive`` gives, then ``http.disconnect``.
    Returns what the layer sent and how many of ``incoming`` it read."""
    door = FrontDoor(
        app,
        path="/mcp",
        streams=StreamLog(plain(app), SessionRegistry()),
        cap=SessionCap(app, max_sessions=10, retry_after=1),
    )
    guarded = door.secured(Security(None, BodyGate(None, 4096)))
    headers = [(b"mcp-session-id", b"abc"), *headers]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    sent: list[Message] = []
    read = 0

    async def receive() -> Message:
        nonlocal read
        if read < len(incoming):
            read += 1
            return incoming[read - 1]
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await guarded(scope, receive, send)
    return sent, read


def chunks(sizes: list[int], last: bool = True) -> list[Message]:
    """Body messages of these sizes; the last says no more follows when ``last``."""
    return [
        {"type": "http.request", "body": b"x" * size, "more_body": not last or i < len(sizes) - 1}
        for i, size in enumerate(sizes)
    ]


CHUNKED = [(b"transfer-encoding", b"chunked")]


async def test_guard_counts_a_chunked_body_and_refuses_it_as_soon_as_it_passes_the_limit() -> None:
    app = RecordingApp()
    sent, read = await drive_guard(app, CHUNKED, chunks([1000] * 10))
    assert app.bodies == []  # the app never ran, so it never started a response either
    assert read == 5  # stopped reading at the chunk that passed 4096 bytes
    start, body = sent
    assert start["status"] == 413
    assert (b"connection", b"close") in start["headers"]  # the rest of the body is not read
    assert json.loads(body["body"]) == {"error": "request body over 4096 bytes"}


async def test_guard_hands_the_app_a_chunked_body_up_to_the_limit_whole() -> None:
    app = RecordingApp()
    sent, read = await drive_guard(app, CHUNKED, chunks([1000, 3000, 96]))
    assert app.bodies == [b"x" * 4096]
    assert read == 3
    assert sent[0]["status"] == 200
    assert all(name != b"connection" for name, _ in sent[0]["headers"])


@pytest.mark.parametrize(
    ("declared", "sizes", "error"),
    [
        (100, [100, 50], "request body longer than its Content-Length"),
        (100, [60], "request body shorter than its Content-Length"),
    ],
)
async def test_guard_refuses_a_body_that_does_not_match_its_content_length(
    declared: int, sizes: list[int], error: str
) -> None:
    app = RecordingApp()
    headers = [(b"content-length", str(declared).encode())]
    sent, _ = await drive_guard(app, headers, chunks(sizes))
    assert app.bodies == []
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"]) == {"error": error}


async def test_guard_answers_nothing_when_the_client_goes_away_mid_body() -> None:
    app = RecordingApp()
    sent, read = await drive_guard(app, CHUNKED, chunks([1000], last=False))
    assert (sent, app.bodies, read) == ([], [], 1)


async def init_then_padding(padding: int) -> AsyncIterator[bytes]:
    """A chunked body: a valid initialize, then ``padding`` bytes of JSON whitespace.
    The whole body is a valid request, so only the size limit can refuse it."""
    yield json.dumps(INIT).encode()
    for start in range(0, padding, 1024):
        yield b" " * min(1024, padding - start)


async def test_a_chunked_body_over_the_limit_gets_413_and_never_reaches_the_app(inproc) -> None:
    server, url = await inproc.server(max_body_bytes="4096")
    async with client_of(url) as client:
        small = await client.post(url, content=init_then_padding(1000), headers=HEADERS)
        assert small.status_code == 200  # a chunked body within the limit goes through
        assert small.request.headers["transfer-encoding"] == "chunked"

        mark = server.mark()
        refused = await client.post(url, content=init_then_padding(200_000), headers=HEADERS)
        assert "content-length" not in refused.request.headers
        assert refused.status_code == 413
        assert refused.headers["content-type"] == "application/json"
        assert refused.json() == {"error": "request body over 4096 bytes"}
        line = await server.await_line(
            r"\[guard\] body refused at \d+ bytes", since=mark, timeout=5
        )
        assert "over the limit of 4096 (no Content-Length) POST /mcp" in line

        assert (await client.post(url, json=INIT, headers=HEADERS)).status_code == 200
    await server.await_line(r"\[initialize\] .*client=guard-test/", since=mark, timeout=5)
    # Two accepted initializes: the refused body never reached the app.
    assert len(server.matching(r"\[initialize\] .*client=guard-test/")) == 2
    assert len(server.matching(r"\[guard\] body refused")) == 1
    assert "Traceback" not in "\n".join(server.lines)


async def test_hostile_json_rpc_gets_clear_errors(inproc) -> None:
    server, url = await inproc.server()
    assert (await apost(url, b"{not json")).status_code == 400
    assert (await apost(url, b"[]")).status_code in (400, 200)
    assert (await apost(url, {"jsonrpc": "2.0", "id": 1})).status_code == 400
    unknown = {"Mcp-Session-Id": "no-such-session", "MCP-Protocol-Version": "2025-11-25"}
    assert (await apost(url, INIT, **unknown)).status_code in (400, 404)
    raw = RawSession(url, "hostile")
    try:
        await raw.initialize()
        assert (await raw.request("no/such/method"))["error"]["code"] == -32601
        assert (await raw.request("resources/read", {"uri": 42}))["error"]["code"] == -32602
        deep: object = STATUS_URI
        for _ in range(200):
            deep = {"uri": deep}
        status, nested = await raw.post(
            {"jsonrpc": "2.0", "id": 99, "method": "resources/read", "params": deep}
        )
        assert status == 400 and nested is not None
        assert nested["error"]["code"] == -32700  # the SDK's parser refuses the depth
        assert (
            "version: 1"
            in (await raw.request("resources/read", {"uri": STATUS_URI}))["result"]["contents"][0][
                "text"
            ]
        )
    finally:
        await raw.close()
    assert "Traceback" not in "\n".join(server.lines)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
METHODS = st.sampled_from(
    [
        "initialize",
        "resources/read",
        "resources/subscribe",
        "ping",
        "resources/list",
        "subscriptions/listen",
        "tools/call",
        "x",
    ]
)
MESSAGES = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "method": METHODS},
    optional={"id": st.integers() | st.text(max_size=5) | st.none(), "params": JSON_VALUES},
)
BODIES = MESSAGES.map(lambda m: json.dumps(m).encode()) | st.binary(max_size=200)
# Printable ASCII without edge spaces: what an HTTP client can send at all.
HEADER_VALUES = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30).map(
    str.strip
)


async def test_fuzzed_requests_never_get_a_5xx_and_the_server_still_serves(inproc) -> None:
    server, url = await inproc.server(update_delay_seconds="0.3")
    await inproc.updater(update_delay_seconds="0.3")
    statuses: list[int] = []
    client = client_of(url)

    async def send(body: bytes, headers: dict[str, str]) -> httpx2.Response:
        return await client.post(url, content=body, headers=headers)

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=BODIES, session=HEADER_VALUES, version=HEADER_VALUES, accept=HEADER_VALUES)
    def one(body: bytes, session: str, version: str, accept: str) -> None:
        headers = {**HEADERS, "Accept": accept or HEADERS["Accept"]}
        if session:
            headers["Mcp-Session-Id"] = session
        if version:
            headers["MCP-Protocol-Version"] = version
        response = anyio.from_thread.run(send, body, headers)
        statuses.append(response.status_code)
        assert response.status_code < 500, (body, headers, response.text[:200])

    # Hypothesis drives its examples from a worker thread; each request runs in
    # this loop, where the app runs.
    async with client:
        await anyio.to_thread.run_sync(one)
    assert len(statuses) >= 100
    assert "Traceback" not in "\n".join(server.lines)
    async with connect(url, "after-fuzz") as lab_client:
        await lab_client.session.subscribe_resource(STATUS_URI)
        await lab_client.wait_updated(1, timeout=15)
        assert version_of(await lab_client.read_text()) == 2
