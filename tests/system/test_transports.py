"""Both protocol generations over every transport the SDK supports: the flow reaches version 2.

- 2025-11-25 over Streamable HTTP is in test_flow.py;
- 2026-07-28 (server/discover, subscriptions/listen) over Streamable HTTP and stdio;
- 2025-11-25 over legacy SSE and over stdio.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_lab import protocol
from tests.support.lab import (
    ROOT,
    STATUS_URI,
    amcp_lab,
    connect,
    connect_sse,
    connect_stdio,
    lab_env,
    stdio_server,
    version_of,
)

pytestmark = pytest.mark.anyio

DELAY = "0.5"
BOUND = 15.0


def text_of(result: mcp_types.ReadResourceResult) -> str:
    content = result.contents[0]
    assert isinstance(content, mcp_types.TextResourceContents)
    return content.text


async def modern_flow(client: Client) -> None:
    """read v1, listen, the update event, read v2 (2026-07-28)."""
    assert client.protocol_version == "2026-07-28"
    listed = await client.list_resources()
    assert [str(r.uri) for r in listed.resources] == [STATUS_URI]
    assert version_of(text_of(await client.read_resource(STATUS_URI))) == 1
    with anyio.fail_after(float(DELAY) + BOUND):
        async with client.listen(resource_subscriptions=[STATUS_URI]) as subscription:
            assert subscription.honored.resource_subscriptions == [STATUS_URI]
            async for update in subscription:
                assert update.uri == STATUS_URI
                break
    assert version_of(text_of(await client.read_resource(STATUS_URI))) == 2


async def test_modern_listen_over_streamable_http(lab, redis_url) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY)
    await lab.aupdater(update_delay_seconds=DELAY)
    info = mcp_types.Implementation(name="modern-client", version="1.0")
    async with Client(url, client_info=info) as client:
        caps = client.server_capabilities
        assert caps is not None and caps.resources is not None and caps.resources.subscribe
        await modern_flow(client)
    who = r"session=modern:modern-client/1\.0 client=modern-client/1\.0"
    await server.await_line(rf"\[server/discover\] client connected {who}")
    await server.await_line(rf"\[subscriptions/listen\] uri=test://review/status {who} job=")
    await server.await_line(rf"\[notification/send\] notifications/resources/updated .*{who}")
    await server.await_line(rf"\[resources/read\] uri=test://review/status version=2 {who}")

    result = await amcp_lab(lab_env(redis_url), "report", "--format", "json")
    entry = next(c for c in json.loads(result.stdout)["clients"] if c["client"] == "modern-client")
    assert entry["level"] == 6
    session = entry["sessions"][0]
    assert session["protocol"] == "2026-07-28"
    assert all(session["checkpoints"].values()), session["checkpoints"]
    await server.await_line(rf"\[subscriptions/listen\] stream ended {who}")


async def test_modern_unknown_resource_is_invalid_params(lab) -> None:
    _, url = await lab.aserver()
    async with Client(url) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource("test://no/such")
    assert caught.value.error.code == -32602
    assert caught.value.error.data == {"uri": "test://no/such"}


async def test_legacy_sse_transport(lab) -> None:
    server, url = await lab.aserver(update_delay_seconds=DELAY)
    await lab.aupdater(update_delay_seconds=DELAY)
    sse_url = url.removesuffix("/mcp") + "/sse"
    async with connect_sse(sse_url, "sse-client") as client:
        assert version_of(await client.read_text()) == 1
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=float(DELAY) + BOUND)
        assert version_of(await client.read_text()) == 2
    await server.await_line(
        r"\[initialize\] client connected .*client=sse-client/1\.0 .*transport=sse"
    )
    line = await server.await_line(r"\[notification/send\] .*client=sse-client/")
    assert "delivered=no" not in line


async def test_legacy_flow_over_stdio_logs_only_to_stderr(lab, redis_url) -> None:
    await lab.aupdater(update_delay_seconds=DELAY)
    env = lab_env(redis_url, update_delay_seconds=DELAY)
    with tempfile.TemporaryFile("w+") as errlog:
        async with connect_stdio(env, errlog, "stdio-client") as client:
            assert version_of(await client.read_text()) == 1
            await client.session.subscribe_resource(STATUS_URI)
            await client.wait_updated(1, timeout=float(DELAY) + BOUND)
            assert version_of(await client.read_text()) == 2
        errlog.seek(0)
        log = errlog.read()
    assert "[initialize] client connected" in log and "transport=stdio" in log
    assert "[notification/send] notifications/resources/updated" in log
    assert "delivered=no" not in log


async def test_modern_listen_over_stdio(lab, redis_url) -> None:
    await lab.aupdater(update_delay_seconds=DELAY)
    env = lab_env(redis_url, update_delay_seconds=DELAY)
    info = mcp_types.Implementation(name="modern-stdio", version="1.0")
    async with Client(stdio_server(env), client_info=info) as client:
        await modern_flow(client)


def test_stdio_stdout_carries_only_protocol(redis_url) -> None:
    request = protocol.initialize_request("raw", "0")
    listing = {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}
    initialized = protocol.initialized_notification()
    stdin = "\n".join(json.dumps(m) for m in (request, initialized, listing)) + "\n"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_lab", "server", "--transport", "stdio"],
        cwd=ROOT,
        env=lab_env(redis_url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    try:
        proc.stdin.write(stdin)
        proc.stdin.flush()
        replies = [json.loads(lines.get(timeout=30)) for _ in range(2)]
        proc.stdin.close()  # end of input: the server exits
        proc.wait(timeout=30)
        reader.join(timeout=10)
    finally:
        proc.kill()
    assert [r["id"] for r in replies] == [1, 2]
    assert all(r["jsonrpc"] == "2.0" for r in replies)
    assert replies[1]["result"]["resources"][0]["uri"] == STATUS_URI
    assert lines.empty()  # nothing else on stdout
    assert "[resources/list] requested" in proc.stderr.read()


async def test_one_publish_reaches_a_legacy_session_and_a_listen_stream_on_two_replicas(
    lab, redis_client
) -> None:
    one, url_one = await lab.aserver(update_delay_seconds="600")
    two, url_two = await lab.aserver(update_delay_seconds="600")
    info = mcp_types.Implementation(name="modern-replica", version="1.0")
    async with (
        connect(url_one, "legacy-replica") as legacy,
        Client(url_two, client_info=info) as modern,
    ):
        await legacy.session.subscribe_resource(STATUS_URI)
        with anyio.fail_after(BOUND):
            async with modern.listen(resource_subscriptions=[STATUS_URI]) as subscription:
                await two.await_line(
                    r"\[subscriptions/listen\] uri=test://review/status .*modern-replica"
                )
                assert redis_client.publish("mcp:resources:updated", STATUS_URI) == 2
                async for update in subscription:
                    assert update.uri == STATUS_URI
                    break
        assert await legacy.wait_updated(1, timeout=BOUND) == [STATUS_URI]
    await one.await_line(r"\[notification/send\] .*client=legacy-replica/")
    await two.await_line(r"\[notification/send\] .*client=modern-replica/")
