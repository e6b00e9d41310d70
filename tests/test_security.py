"""Who may talk to the server, and what hostile input gets: a clear 4xx, never a 5xx or a hang."""

from __future__ import annotations

import json

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.lab import STATUS_URI, RawSession, connect, lab_env, mcp_lab, version_of

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "guard-test", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(url: str, body: object, **headers: str) -> httpx2.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx2.post(url, content=content, headers={**HEADERS, **headers}, timeout=10)


def test_origin_from_another_site_gets_403_and_localhost_origins_pass(lab) -> None:
    _, url = lab.server()
    assert post(url, INIT, Origin="https://evil.example").status_code == 403
    sse = url.removesuffix("/mcp") + "/sse"
    assert (
        httpx2.get(sse, headers={"Origin": "https://evil.example"}, timeout=10).status_code == 403
    )
    assert post(url, INIT, Origin="http://localhost:3000").status_code == 200
    assert post(url, INIT).status_code == 200  # no Origin: not a browser


def test_a_foreign_host_header_gets_421_and_allow_lists_open_it(lab) -> None:
    _, url = lab.server(allowed_hosts="lab.internal", allowed_origins="https://ui.example")
    assert post(url, INIT, Host="attacker.example").status_code == 421
    assert post(url, INIT, Host="lab.internal").status_code == 200
    assert post(url, INIT, Origin="https://ui.example").status_code == 200
    assert post(url, INIT, Origin="https://other.example").status_code == 403


async def test_auth_token_is_required_when_set(lab) -> None:
    _, url = lab.server(auth_token="s3cret", update_delay_seconds="0.3")
    lab.updater(update_delay_seconds="0.3")
    base = url.removesuffix("/mcp")
    refused = post(url, INIT)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert post(url, INIT, Authorization="Bearer wrong").status_code == 401
    assert post(url, INIT, Authorization="Bearer s3cret").status_code == 200
    assert httpx2.get(f"{base}/healthz", timeout=10).status_code == 200
    assert httpx2.get(f"{base}/api/report", timeout=10).status_code == 401
    assert httpx2.get(f"{base}/api/report?token=s3cret", timeout=10).status_code == 200

    result = mcp_lab(
        lab_env(""),
        "probe",
        "--url",
        url,
        "--auth-token",
        "s3cret",
        "--protocol",
        "legacy",
        "--timeout",
        "15",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert mcp_lab(lab_env(""), "probe", "--url", url, "--timeout", "5").returncode == 3


def test_an_oversized_body_gets_413(lab) -> None:
    server, url = lab.server(max_body_bytes="4096")
    huge = {**INIT, "params": {**INIT["params"], "padding": "x" * 10_000}}
    assert post(url, huge).status_code == 413
    server.wait_for(r"\[guard\] body of \d+ bytes refused")
    assert post(url, INIT).status_code == 200


async def test_hostile_json_rpc_gets_clear_errors(lab) -> None:
    server, url = lab.server()
    assert post(url, b"{not json").status_code == 400
    assert post(url, b"[]").status_code in (400, 200)
    assert post(url, {"jsonrpc": "2.0", "id": 1}).status_code == 400
    assert post(
        url, INIT, **{"Mcp-Session-Id": "no-such-session", "MCP-Protocol-Version": "2025-11-25"}
    ).status_code in (400, 404)
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


def test_fuzzed_requests_never_get_a_5xx_and_the_server_still_serves(lab) -> None:
    server, url = lab.server(update_delay_seconds="0.3")
    lab.updater(update_delay_seconds="0.3")
    statuses: list[int] = []

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
        response = httpx2.post(url, content=body, headers=headers, timeout=10)
        statuses.append(response.status_code)
        assert response.status_code < 500, (body, headers, response.text[:200])

    one()
    assert len(statuses) >= 100
    assert "Traceback" not in "\n".join(server.lines)
    import anyio

    async def normal_client() -> int:
        async with connect(url, "after-fuzz") as client:
            await client.session.subscribe_resource(STATUS_URI)
            await client.wait_updated(1, timeout=15)
            return version_of(await client.read_text())

    assert anyio.run(normal_client) == 2
