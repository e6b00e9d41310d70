"""Resumable GET streams: priming, Last-Event-ID replay from Redis, on any replica."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest

from services import contract
from services.server.resume.eventstore import entry_of
from tests.lab import STATUS_URI, TS_CLIENT_DIR, RawSession, connect, version_of

pytestmark = pytest.mark.anyio

CHANNEL = "mcp:resources:updated"


@dataclass
class SseEvent:
    id: str | None
    retry: int | None
    data: str

    @property
    def message(self) -> dict[str, Any]:
        return json.loads(self.data)


class SseStream:
    """The events of one open GET stream, read one at a time with a bound."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self, timeout: float = 10.0) -> SseEvent:
        fields: dict[str, str] = {}
        with anyio.fail_after(timeout):
            async for line in self._lines:
                if not line:
                    if fields:
                        retry = fields.get("retry")
                        return SseEvent(fields.get("id"), int(retry) if retry else None,
                                        fields.get("data", ""))  # fmt: skip
                    continue
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        raise AssertionError("stream ended")

    async def next_message(self, timeout: float = 10.0) -> SseEvent:
        """The next event that carries a message (priming events skipped)."""
        with anyio.fail_after(timeout):
            while not (event := await self.next()).data:
                pass
        return event


def get_headers(session: str, last_event_id: str | None = None) -> dict[str, str]:
    """Headers of a GET stream request for ``session``, resuming after ``last_event_id``."""
    headers = {
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
    }
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    return headers


@asynccontextmanager
async def get_stream(
    url: str, session: str, last_event_id: str | None = None
) -> AsyncIterator[SseStream]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        async with http.stream("GET", url, headers=get_headers(session, last_event_id)) as response:
            assert response.status_code == 200, response.status_code
            yield SseStream(response)


async def subscribed_raw(url: str, name: str) -> RawSession:
    raw = RawSession(url, name)
    await raw.initialize()
    await raw.request("resources/subscribe", {"uri": STATUS_URI})
    assert raw.session_id
    return raw


def assert_updated(event: SseEvent) -> None:
    assert event.id and entry_of(event.id) is not None
    assert event.message["method"] == "notifications/resources/updated"
    assert event.message["params"] == {"uri": STATUS_URI}


async def test_a_dropped_get_stream_resumes_and_receives_what_it_missed(lab, redis_client) -> None:
    server, url = await lab.aserver(update_delay_seconds="600", retry_ms="1500")
    raw = await subscribed_raw(url, "resumer")
    try:
        async with get_stream(url, raw.session_id) as stream:
            priming = await stream.next()
        assert priming.data == "" and priming.retry == 1500
        assert priming.id and entry_of(priming.id) is not None
        await server.await_line(r"\[stream/close\]")

        mark = server.mark()
        redis_client.publish(CHANNEL, STATUS_URI)
        await server.await_line(r"\[notification/send\] .*delivered=no", since=mark)

        async with get_stream(url, raw.session_id, last_event_id=priming.id) as stream:
            missed = await stream.next_message()
            assert_updated(missed)
            await server.await_line(r"\[resume\] replay session=.* events=1", since=mark)
            # The resumed stream is the session's GET stream now: later ones arrive live,
            # once the SDK has primed it (a notification sent before that is stored but
            # not written: the SDK's replay-to-live window, see test_resume_inproc.py).
            again = await stream.next()
            assert again.data == "" and again.id, again
            redis_client.publish(CHANNEL, STATUS_URI)
            live = await stream.next_message()
            assert_updated(live)
            assert live.id > missed.id
        assert server.matching(r"\[notification/resume\] .*client=resumer/", since=mark)
    finally:
        await raw.close()


async def test_another_replica_serves_the_resume_and_follows_the_stream(lab, redis_client) -> None:
    owner, owner_url = await lab.aserver(update_delay_seconds="600")
    other, other_url = await lab.aserver(update_delay_seconds="600")
    raw = await subscribed_raw(owner_url, "wanderer")
    try:
        async with get_stream(owner_url, raw.session_id) as stream:
            priming = await stream.next()
        await owner.await_line(r"\[stream/close\]")
        mark = owner.mark()
        redis_client.publish(CHANNEL, STATUS_URI)
        await owner.await_line(r"\[notification/send\] .*delivered=no", since=mark)

        async with get_stream(other_url, raw.session_id, last_event_id=priming.id) as stream:
            assert_updated(await stream.next_message())
            await other.await_line(r"\[resume\] serving session=.* replayed=1")
            redis_client.publish(CHANNEL, STATUS_URI)
            assert_updated(await stream.next_message())
            # The session ends on its owner: the follower closes the stream.
            status, _ = await delete_session(owner_url, raw.session_id)
            assert status == 200
            with anyio.fail_after(10):
                with pytest.raises(AssertionError, match="stream ended"):
                    await stream.next()
        await other.await_line(r"\[resume\] session=.* ended on its owner")
        assert len(other.matching(r"\[notification/resume\] ")) == 2
        # Ended: no replica resumes it any more.
        async with httpx2.AsyncClient(timeout=10) as http:
            response = await http.get(other_url, headers=get_headers(raw.session_id, priming.id))
        assert response.status_code == 404
        assert not redis_client.exists(contract.resume_key(raw.session_id))
    finally:
        await raw.close()


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
    server, url = await lab.aserver(update_delay_seconds="3")
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
    server, url = await lab.aserver(update_delay_seconds="3")
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
