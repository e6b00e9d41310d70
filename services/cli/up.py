"""``mcp-lab up``: Redis, server and updater as separate processes, with prefixed logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import IO

from services import contract
from services.catalog import REVIEW_STATUS
from services.cli.embedded_redis import EmbeddedRedis, free_port, redis_binary, start_redis
from services.settings import LabSettings

DEFAULT_EMBEDDED_REDIS_PORT = 6390
_STOP_TIMEOUT_SECONDS = 5


def _pump(name: str, stream: IO[bytes], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        with lock:
            print(f"{name:<7} | {line}", flush=True)


def _spawn(command: str, env: dict[str, str], lock: threading.Lock) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "services", command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    threading.Thread(target=_pump, args=(command, process.stdout, lock), daemon=True).start()
    return process


def _port_is_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextmanager
def _redis_for_lab(
    settings: LabSettings, redis_port: int | None
) -> Iterator[tuple[str, EmbeddedRedis | None]]:
    if "redis_url" in settings.model_fields_set:  # REDIS_URL from the environment or .env
        yield settings.redis_url, None
        return
    port = redis_port or (
        DEFAULT_EMBEDDED_REDIS_PORT if _port_is_free(DEFAULT_EMBEDDED_REDIS_PORT) else free_port()
    )
    embedded = start_redis(port)
    try:
        yield embedded.url, embedded
    finally:
        embedded.stop()


def _banner(settings: LabSettings, redis_url: str, embedded: EmbeddedRedis | None) -> str:
    if embedded is not None:
        cli = f"{redis_binary('redis-cli')} -p {embedded.port}"
        where = f"embedded redis-server on 127.0.0.1:{embedded.port}"
    else:
        cli = f"redis-cli -u {redis_url}"
        where = redis_url
    uri = REVIEW_STATUS.uri
    return "\n".join(
        [
            "",
            f"  MCP server   {settings.mcp_url}   (Streamable HTTP: 2025-11-25 and 2026-07-28)",
            *([f"               {settings.sse_url}   (legacy SSE)"] if settings.sse_path else []),
            f"  Dashboard    {settings.base_url}/",
            f"  Redis        {where}",
            f"  State scope  {settings.state_scope}; update {settings.update_delay_seconds}s "
            "after each subscribe",
            "",
            "  Notify every subscribed session (no version change):",
            f"    {cli} publish {settings.updates_channel} {uri}",
            "  Full update (bump + notify) of every subscribed session, done by the updater:",
            f"    {cli} XADD {contract.JOBS_STREAM} '*' uri {uri} target '*' delay 0",
            "  or: mcp-lab trigger            (mcp-lab reset: every state back to version 1)",
            "",
            "  Ctrl-C stops everything.",
            "",
        ]
    )


def run_lab(settings: LabSettings, redis_port: int | None = None) -> int:
    """Run the whole lab until Ctrl-C (or SIGTERM) or until a process dies."""
    lock = threading.Lock()
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with _redis_for_lab(settings, redis_port) as (redis_url, embedded):
        env = {**os.environ, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}
        processes = {name: _spawn(name, env, lock) for name in ("server", "updater")}
        with lock:
            print(_banner(settings, redis_url, embedded), flush=True)
        exit_code = 0
        while not stopping.wait(0.2):
            dead = [name for name, p in processes.items() if p.poll() is not None]
            if dead:
                with lock:
                    for name in dead:
                        print(
                            f"lab     | {name} exited with code {processes[name].returncode}; "
                            "stopping the lab",
                            flush=True,
                        )
                exit_code = 1
                break
        with lock:
            print("lab     | stopping server and updater", flush=True)
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in processes.values():
            try:
                process.wait(timeout=_STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return exit_code
