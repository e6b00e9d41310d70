"""The HTTP checks on a real server process: bodies cut off and lying Content-Lengths
(uvicorn's sockets), and the probe sending the token."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from mcp_lab import protocol
from tests.support.http_calls import post
from tests.support.lab import lab_env, mcp_lab

INIT = protocol.initialize_request("guard-test", "0")



def test_probe_sends_the_auth_token(lab) -> None:
    _, url = lab.server(auth_token="s3cret", update_delay_seconds="0.3")
    lab.updater(update_delay_seconds="0.3")
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


@pytest.mark.parametrize(
    ("host", "status"),
    [(None, b"413"), ("attacker.example", b"421")],
    ids=["over-the-limit", "foreign-host"],
)
def test_an_endless_chunked_body_is_answered_and_cut_off(
    lab, host: str | None, status: bytes
) -> None:
    server, url = lab.server(max_body_bytes="4096")
    port = urlsplit(url).port
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"400\r\n" + b" " * 1024 + b"\r\n"  # 1 KB chunks, never the last one
    stop = threading.Event()
    sent = 0

    def pump(sock: socket.socket) -> None:
        nonlocal sent
        deadline = time.monotonic() + 15
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                sock.sendall(chunk)
                sent += 1024
        except OSError:
            pass  # the server closed the connection: what this test waits for

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        sender = threading.Thread(target=pump, args=(sock,), daemon=True)
        started = time.monotonic()
        sender.start()
        try:
            data, ending = read_until_closed(sock, bound=10)
        finally:
            stop.set()
            sender.join(timeout=10)
        took = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 " + status), data[:200]
    assert b"connection: close" in data.lower()
    assert ending in ("eof", "reset"), f"connection still open after {took:.1f}s, {sent} B sent"
    assert took < 5, took
    if status == b"413":
        assert data.endswith(b'{"error": "request body over 4096 bytes"}')
        server.wait_for(r"\[guard\] body refused at \d+ bytes, over the limit of 4096 ", timeout=5)
    assert post(url, INIT).status_code == 200
    assert "Traceback" not in "\n".join(server.lines)


def test_a_content_length_that_lies_cannot_carry_more_than_it_says(lab) -> None:
    """Content-Length says one initialize; 100 KB more follow. The app gets exactly
    the declared bytes (it answers the initialize, not a parse error or a 413), and
    the rest is refused as a malformed next request; nothing of it reaches the app."""
    server, url = lab.server(max_body_bytes="4096")
    port = urlsplit(url).port
    body = json.dumps(INIT).encode()
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request + body + b'{"smuggled": "' + b"x" * 100_000 + b'"}')
        except OSError:
            pass  # the server may refuse the excess and close before it is all written
        data, ending = read_until_closed(sock, bound=10)
    assert ending in ("eof", "reset"), "the server kept the connection open"
    assert data.startswith(b"HTTP/1.1 200 "), data[:200]
    assert b'"protocolVersion":"2025-11-25"' in data  # the declared body, parsed whole
    assert data.count(b"HTTP/1.1 ") <= 2 and b"HTTP/1.1 5" not in data
    server.wait_for(r"Invalid HTTP request received", timeout=5)  # uvicorn, on the excess
    assert len(server.matching(r"\[initialize\] .*client=guard-test/")) == 1
    assert post(url, INIT).status_code == 200
    assert "Traceback" not in "\n".join(server.lines)


def read_until_closed(sock: socket.socket, bound: float) -> tuple[bytes, str]:
    """Everything the server sends until it closes (``eof`` or ``reset``) or
    ``bound`` seconds pass (``timeout``)."""
    data = b""
    deadline = time.monotonic() + bound
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            received = sock.recv(65536)
        except ConnectionResetError:
            return data, "reset"
        except TimeoutError:
            break
        if not received:
            return data, "eof"
        data += received
    return data, "timeout"
