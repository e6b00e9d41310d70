"""Resumable GET streams against server processes: SDK clients (Python and TypeScript)
cut off mid-run by a proxy resume, an id no longer kept, garbage in a resume stream.
The wire checks of priming and replay on any replica run in process
(tests/server/resume/test_resume.py)."""

from __future__ import annotations

import asyncio
import json

import anyio
import httpx2
import pytest

from mcp_lab import contract
from mcp_lab.server.resume.eventstore import entry_of
from tests.support.lab import STATUS_URI, TS_CLIENT_DIR, connect, version_of
from tests.support.sse import CHANNEL, assert_updated, get_headers, get_stream, subscribed_raw

pytestmark = pytest.mark.anyio


async def delete_session(url: str, session: str) -> tuple[int, str]:
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.delete(
            url, headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        )
    return response.status_code, response.text


class CuttableProxy:
    """A TCP proxy on loopback whose connections can be cut, and new ones held back."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._open: set[asyncio.StreamWriter] = set()
        self._allowed = asyncio.Event()
        self._allowed.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._allowed.wait()
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._open.update({writer, up_writer})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._open.difference_update({writer, up_writer})

    def cut_and_hold(self) -> None:
        """Cut every connection; new ones wait until :meth:`release`."""
        self._allowed.clear()
        for writer in list(self._open):
            writer.transport.abort()

    def release(self) -> None:
        self._allowed.set()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_sdk_client_cut_off_mid_run_resumes_and_gets_its_notification(lab) -> None:
    # The proxy listens on a port of its own: a loopback Host with that port is
    # refused unless allowed (an entry without a port allows any).
    server, url = await lab.aserver(update_delay_seconds="3", allowed_hosts="127.0.0.1")
    await lab.aupdater()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    proxy = CuttableProxy(port)
    proxied = f"http://127.0.0.1:{await proxy.start()}/mcp"
    try:
        async with connect(proxied, "cut-off") as client:
            await server.await_line(r"\[stream/open\] .*client=cut-off/")
            await client.session.subscribe_resource(STATUS_URI)
            # The client's connections are cut while the update is pending, and
            # held back until the update has gone out with no stream to carry it.
            proxy.cut_and_hold()
            await server.await_line(r"\[stream/close\] .*client=cut-off/")
            await server.await_line(r"\[notification/send\] .*delivered=no", timeout=15)
            proxy.release()
            assert await client.wait_updated(1, timeout=15) == [STATUS_URI]
            await server.await_line(r"\[resume\] replay session=.* events=1")
            assert version_of(await client.read_text()) == 2
            assert client.updated == [STATUS_URI]  # once, not twice
    finally:
        proxy.close()


async def test_a_last_event_id_no_longer_kept_still_gets_a_live_stream(lab, redis_client) -> None:
    server, url = await lab.aserver(update_delay_seconds="600")
    raw = await subscribed_raw(url, "late-resumer")
    try:
        async with get_stream(url, raw.session_id) as stream:
            priming = await stream.next()
        # Trimmed away, as the oldest events are once a session has had its fill.
        kept = entry_of(priming.id)
        assert kept is not None
        assert redis_client.xdel(contract.resume_key(raw.session_id), kept[0]) == 1
        mark = server.mark()
        async with get_stream(url, raw.session_id, last_event_id=priming.id) as stream:
            await server.await_line(r"\[resume\] session=.* is no longer kept", since=mark)
            redis_client.publish(CHANNEL, STATUS_URI)
            assert_updated(await stream.next_message())
    finally:
        await raw.close()


@pytest.mark.timeout(600)  # the first use installs the SDK with npm ci
async def test_typescript_sdk_client_cut_off_mid_run_resumes(lab, node_client) -> None:
    # The proxy listens on a port of its own: a loopback Host with that port is
    # refused unless allowed (an entry without a port allows any).
    server, url = await lab.aserver(update_delay_seconds="3", allowed_hosts="127.0.0.1")
    await lab.aupdater()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    proxy = CuttableProxy(port)
    proxied = f"http://127.0.0.1:{await proxy.start()}/mcp"
    node = await asyncio.create_subprocess_exec(
        node_client,
        "flow.mjs",
        proxied,
        "--client-name",
        "ts-resumer",
        "--timeout",
        "30",
        cwd=TS_CLIENT_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await server.await_line(r"\[resources/subscribe\] .*client=ts-resumer/", timeout=30)
        proxy.cut_and_hold()
        await server.await_line(r"\[stream/close\] .*client=ts-resumer/")
        await server.await_line(r"\[notification/send\] .*client=ts-resumer/.*delivered=no")
        proxy.release()
        with anyio.fail_after(60):
            out, err = await node.communicate()
        steps = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        assert node.returncode == 0, out.decode() + err.decode()
        assert [s["version"] for s in steps if s["step"] == "read"] == [1, 2]
        await server.await_line(r"\[resume\] replay session=.* events=1")
        assert server.matching(r"\[notification/resume\] .*client=ts-resumer/")
    finally:
        if node.returncode is None:
            node.kill()
            await node.wait()
        proxy.close()


async def test_garbage_in_a_resume_stream_is_a_warning_not_a_traceback(lab, redis_client) -> None:
    server, url = await lab.aserver(update_delay_seconds="600")
    raw = await subscribed_raw(url, "garbled")
    try:
        async with get_stream(url, raw.session_id) as stream:
            priming = await stream.next()
        redis_client.xadd(contract.resume_key(raw.session_id), {"stream": b"\xff\xfe"})
        mark = server.mark()
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.get(url, headers=get_headers(raw.session_id, priming.id))
        assert response.status_code == 200  # an empty stream, closed at once
        await server.await_line(r"\[resume\] replay failed \(.*codec", since=mark)
        assert "Traceback" not in "\n".join(server.lines[mark:])
        assert (await raw.request("resources/read", {"uri": STATUS_URI}))["result"]
    finally:
        await raw.close()
