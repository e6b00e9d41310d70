"""Dashboards that never read: what the server holds for them.

    .venv/bin/python scripts/bench_unread_dashboards.py --unread 200 --hold 45 --events 2000

A run of ``--events`` evidence events of the widest kind (so each report is large),
then ``--unread`` raw sockets, a few at a time, each with a tiny receive buffer
(``SO_RCVBUF`` 1 KiB), that ask ``/api/stream`` and never read; meanwhile an event is
written every ``--publish-every`` seconds, so the report changes and the server keeps
publishing. Every second for ``--hold`` seconds, and once they are all closed: the
server's open files (``/proc/<pid>/fd``), its RSS, the kernel's TCP memory
(``/proc/net/sockstat``, ``TCP: ... mem`` in pages, the whole machine's), the streams
``/healthz`` counts, the unread sockets the server has reset or closed, and whether a
normal viewer opened then gets a report (or a 503 past the cap).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import time
from pathlib import Path

import bench_hostile as bench
import redis

from mcp_lab import contract
from mcp_lab.process.embedded_redis import free_port, start_redis

_PAGE = os.sysconf("SC_PAGE_SIZE")


def server_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def tcp_mem_mb() -> float:
    """The kernel's TCP memory (all sockets of the machine), MB."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            return int(fields[fields.index("mem") + 1]) * _PAGE / 1e6
    return 0.0


def healthz(port: int) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while data := sock.recv(1 << 16):
            answer += data
    return dict(json.loads(answer.split(b"\r\n\r\n", 1)[1]))


def viewer_served(port: int, timeout: float = 15.0) -> str:
    """A normal viewer: ``report`` when a report came within ``timeout``, else what did."""
    deadline = time.monotonic() + timeout
    seen = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(bench.stream_head(port))
            while time.monotonic() < deadline:
                data = sock.recv(1 << 20)
                if not data:
                    return "closed"
                seen = seen[-4096:] + data
                if b"event: report" in seen:
                    return "report"
                if seen.startswith(b"HTTP/1.1 503"):
                    return "503"
    except OSError as exc:
        return type(exc).__name__
    return "nothing"


def unread_socket(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", port))
    sock.sendall(bench.stream_head(port))
    sock.setblocking(False)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server reset or closed ``sock`` (its error, or an end after its data:
    reading it says so without reading what is queued, beyond a peek)."""
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        return True
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False


async def unread_dashboards(
    events: int, per_session: int, unread: int, hold: float, every: float
) -> None:
    embedded = start_redis()
    client = redis.Redis.from_url(embedded.url)
    port = free_port()
    server = bench.start(embedded.url, port)
    pid = server.process.pid
    socks: list[socket.socket] = []
    gone: set[socket.socket] = set()  # reset or closed by the server (an error reads once)
    stop = asyncio.Event()
    try:
        pipe = client.pipeline(transaction=False)
        for fields in bench.widest_events(events, per_session):
            pipe.xadd(contract.EVENTS_STREAM, fields)  # type: ignore[arg-type]
        pipe.execute()
        extra = bench.widest_events(10_000, per_session)

        async def keep_publishing() -> None:
            at = 0
            while not stop.is_set():
                await asyncio.to_thread(client.xadd, contract.EVENTS_STREAM, extra[at % len(extra)])  # type: ignore[arg-type]
                at += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), every)

        first = await asyncio.to_thread(viewer_served, port, 120.0)  # the first build
        before = (server_files(pid), bench.rss_mb(pid), tcp_mem_mb())
        print(
            f"unread-dashboards: {events} widest events; a viewer alone: {first}; before: "
            f"server fds {before[0]}, RSS {before[1]:.0f} MB, kernel TCP mem {before[2]:.0f} MB"
        )
        publishing = asyncio.create_task(keep_publishing())
        start = time.monotonic()
        peak = list(before)
        print("   t  opened  fds   RSS MB  TCP MB  streams  closed-by-server  viewer")
        while (elapsed := time.monotonic() - start) < hold:
            while len(socks) < min(unread, int(elapsed * 20) + 20):  # 20 a second
                socks.append(await asyncio.to_thread(unread_socket, port))
            figures = (server_files(pid), bench.rss_mb(pid), tcp_mem_mb())
            peak = [max(p, f) for p, f in zip(peak, figures, strict=True)]
            if int(elapsed) % 5 == 0 or len(socks) < unread:
                streams = (await asyncio.to_thread(healthz, port))["dashboard_streams"]
                gone.update(s for s in socks if s not in gone and closed_by_server(s))
                served = await asyncio.to_thread(viewer_served, port, 5.0)
                print(
                    f"{elapsed:4.0f}  {len(socks):6d}  {figures[0]:4d}  {figures[1]:7.0f}  "
                    f"{figures[2]:6.0f}  {streams!s:>7}  {len(gone):16d}  {served}"
                )
            await asyncio.sleep(1.0)
        stop.set()
        await publishing
        figures = (server_files(pid), bench.rss_mb(pid), tcp_mem_mb())
        gone.update(s for s in socks if s not in gone and closed_by_server(s))
        streams = (await asyncio.to_thread(healthz, port))["dashboard_streams"]
        served = await asyncio.to_thread(viewer_served, port, 15.0)
        print(
            f"unread-dashboards after {hold:.0f} s with {len(socks)} unread sockets open on the "
            f"client's side: server fds {before[0]} -> {figures[0]} (peak {peak[0]}), RSS "
            f"{before[1]:.0f} -> {figures[1]:.0f} MB (peak {peak[1]:.0f}), kernel TCP mem "
            f"{before[2]:.0f} -> {figures[2]:.0f} MB (peak {peak[2]:.0f}); streams counted "
            f"{streams}; {len(gone)} closed by the server; a normal viewer: {served}"
        )
    finally:
        stop.set()
        for sock in socks:
            sock.close()
        server.stop()
        client.close()
        embedded.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=8_800)
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--unread", type=int, default=200)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--publish-every", type=float, default=0.3)
    args = parser.parse_args()
    asyncio.run(
        unread_dashboards(args.events, args.per_session, args.unread, args.hold, args.publish_every)
    )


if __name__ == "__main__":
    main()
