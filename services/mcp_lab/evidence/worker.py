"""The dashboard's reports of long runs, built in a process of their own.

A report of a long run is seconds of CPU: reading up to
``MCP_TEST_DASHBOARD_MAX_EVENTS`` events from Redis (redis-py parses each reply in
Python), scoring them, encoding the JSON. Measured with 8,800 events of the widest
kind a client can make (docs/security.md), one build took 3.4 s; on the server's
event loop it held every request up meanwhile (a client's flow beside 5 dashboards
took 0.7 to 3.5 s instead of 0.1 s), and in a thread the loop still waited for the
GIL at each turn (0.6 to 1.3 s); built here, 0.1 to 0.5 s.
So a server hands the builds of a long run to this process (``python -m
mcp_lab.evidence.worker``), and keeps building short runs itself (a few
milliseconds): :class:`ReportWorker` is its side.

The worker is started when a build first needs it and stopped after
``IDLE_SECONDS`` without one (its memory goes with it), when its server stops,
or when its server dies (its stdin closes). One build at a time. Both sides build
with :func:`produce`, so a report is the same wherever it was built.

Protocol, on the worker's stdin and stdout: a request is one line of JSON
(``kind``: ``report``, the dashboard's encoding, or the name of a format of
:mod:`mcp_lab.evidence.formats`; ``redis_url``, ``max_events``,
``unsaved``, ``secret``: the session labels' secret, hex, and ``of_lab``: whether it is
the lab's, :mod:`mcp_lab.evidence.labels`). The answer is one line of
JSON (``ok``; ``run``, ``places`` and ``size``, or ``redis`` and ``message``),
then ``places`` bytes (the sessions' places, JSON), then ``size`` bytes: the
encoded report, or the rendered file.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import sys
from dataclasses import dataclass
from typing import IO, Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_lab import state
from mcp_lab.evidence import build, formats, report
from mcp_lab.evidence.encoded import Encoded, Place, dumps, encode
from mcp_lab.evidence.labels import SessionLabels

logger = logging.getLogger("mcp_lab.dashboard")

KINDS = ("report", *formats.names())
IDLE_SECONDS = 30.0
_STOP_SECONDS = 2.0
_MODULE = "mcp_lab.evidence.worker"
# What the server reads of an answer at a time (asyncio's default, 64 KiB, pauses the
# pipe every 128 KiB of a report of tens of megabytes).
_READ_LIMIT = 1024 * 1024
# The worker yields the CPU to its server (and its clients) when both want it.
_NICE = 10


@dataclass(frozen=True, slots=True)
class Rendered:
    """The report as a file (rendered in one of :mod:`mcp_lab.evidence.formats`), and
    the id of its run."""

    body: bytes
    run: str | None


class WorkerFailed(RuntimeError):
    """The worker could not build the report (not a Redis error: those are raised as
    :class:`RedisError`), or ended."""


class _Ended(WorkerFailed):
    """The worker ended before it answered."""


async def produce(
    redis: Redis, kind: str, *, unsaved: int, max_events: int, labels: SessionLabels
) -> Encoded | Rendered:
    """The current run's report from at most its ``max_events`` newest events (the one
    report builder, :mod:`mcp_lab.evidence.build`; ``unsaved``: events the server lost
    and could not count in Redis yet), sessions by their labels: encoded
    (``kind="report"``), or rendered in the format of that name, as the server serves
    it (``public``: sessions by label alone)."""
    made = await build.build(redis, unsaved_lost=unsaved, max_events=max_events)
    if kind == "report":
        return encode(labels.public(report.to_json(made)))
    rendered = formats.get(kind).render(made, labels, public=True)
    return Rendered(rendered.encode(), None if made.since_ms is not None else made.run_id)


def release_free_memory() -> None:
    """Hand the C allocator's free pages back to the system: glibc keeps the blocks a
    build freed otherwise, and a process's memory would not fall after a long report."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


_malloc_trim = _find_malloc_trim()


class ReportWorker:
    """The server's side of the worker: started on the first request, stopped after
    ``idle_seconds`` without one."""

    def __init__(self, log_level: str = "INFO", idle_seconds: float = IDLE_SECONDS) -> None:
        self._log_level = log_level
        self._idle_seconds = idle_seconds
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._idle: asyncio.Task[None] | None = None
        self.started = 0  # processes started so far

    @property
    def pid(self) -> int | None:
        """The worker's process id while one runs."""
        return None if self._process is None else self._process.pid

    async def produce(
        self, redis_url: str, kind: str, *, unsaved: int, max_events: int, labels: SessionLabels
    ) -> Encoded | Rendered:
        """:func:`produce` in the worker (started now if none runs)."""
        request = {
            "kind": kind,
            "redis_url": redis_url,
            "max_events": max_events,
            "unsaved": unsaved,
            "secret": labels.secret.hex(),
            "of_lab": labels.of_lab,
        }
        async with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            try:
                answer, places, body = await self._ask(request)
            finally:
                if self._process is not None:
                    self._idle = asyncio.create_task(self._stop_when_idle(), name="report worker")
        if not answer.get("ok"):
            message = str(answer.get("message", "?"))
            raise RedisError(message) if answer.get("redis") else WorkerFailed(message)
        run = answer.get("run")
        if kind != "report":
            return Rendered(body, run)
        return Encoded(body, run, {k: Place(*v) for k, v in json.loads(places).items()})

    async def _ask(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes, bytes]:
        """Ask the worker (one started now if none runs); a worker that had ended
        meanwhile (killed, say) is replaced once."""
        for fresh in (self._process is None, True):
            process = self._process or await self._start()
            try:
                return await _ask(process, request)
            except _Ended:
                self._kill()
                if fresh:
                    raise
            except BaseException:
                self._kill()  # mid-answer (cancelled, or the worker died): never reused
                raise
        raise AssertionError("unreachable")

    async def _start(self) -> asyncio.subprocess.Process:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            _MODULE,
            self._log_level,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_READ_LIMIT,
        )
        self.started += 1
        return self._process

    async def _stop_when_idle(self) -> None:
        await asyncio.sleep(self._idle_seconds)
        async with self._lock:
            self._idle = None
            await self._stop()

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        if process is not None and process.stdin is not None:
            process.stdin.close()

    async def _stop(self) -> None:
        """End the worker: its stdin closes (it exits), or it is killed."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), _STOP_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def close(self) -> None:
        """Stop the worker (a build under way in it is left unfinished)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        if process.stdin is not None:
            process.stdin.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(process.wait())


async def _ended(process: asyncio.subprocess.Process) -> _Ended:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), _STOP_SECONDS)
    return _Ended(f"the report worker ended (exit code {process.returncode})")


async def _ask(
    process: asyncio.subprocess.Process, request: dict[str, Any]
) -> tuple[dict[str, Any], bytes, bytes]:
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(dumps(request) + b"\n")
        await process.stdin.drain()
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise await _ended(process) from exc
    line = await process.stdout.readline()
    if not line:
        raise await _ended(process)
    answer: dict[str, Any] = json.loads(line)
    places = await process.stdout.readexactly(int(answer.get("places", 0)))
    body = await process.stdout.readexactly(int(answer.get("size", 0)))
    return answer, places, body


async def _answer(
    request: dict[str, Any], connections: dict[str, Redis]
) -> tuple[dict, bytes, bytes]:
    url = str(request["redis_url"])
    redis = connections.get(url)
    if redis is None:
        redis = connections[url] = state.connect(url, max_connections=1)
    kind = str(request["kind"])
    if kind not in KINDS:
        raise ValueError(f"no report of kind {kind!r}")
    made = await produce(
        redis,
        kind,
        unsaved=int(request["unsaved"]),
        max_events=int(request["max_events"]),
        labels=SessionLabels(
            bytes.fromhex(str(request["secret"])), of_lab=request.get("of_lab") is True
        ),
    )
    if isinstance(made, Rendered):
        return {"ok": True, "run": made.run}, b"", made.body
    places = dumps({k: [p.start, p.end, p.client, p.version] for k, p in made.places.items()})
    return {"ok": True, "run": made.run}, places, made.event


async def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    connections: dict[str, Redis] = {}
    try:
        while line := requests.readline():  # blocking: the process does nothing else
            try:
                answer, places, body = await _answer(json.loads(line), connections)
            except (RedisError, OSError) as exc:
                answer, places, body = {"ok": False, "redis": True, "message": str(exc)}, b"", b""
            except Exception as exc:
                logger.exception("[dashboard] the report could not be built")
                message = f"{type(exc).__name__}: {exc}"
                answer, places, body = {"ok": False, "message": message}, b"", b""
            answer.update(places=len(places), size=len(body))
            answers.write(dumps(answer) + b"\n")
            answers.write(places)
            answers.write(body)
            answers.flush()
            del answer, places, body
            release_free_memory()
    finally:
        for redis in connections.values():
            await redis.aclose()


def main() -> None:
    """``python -m mcp_lab.evidence.worker [LOG_LEVEL]``: answer requests on stdin
    until it closes."""
    from mcp_lab.logs import setup_logging

    setup_logging(sys.argv[1] if len(sys.argv) > 1 else "INFO")
    with contextlib.suppress(OSError, AttributeError):  # not on every OS
        os.nice(_NICE)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot break the protocol
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        asyncio.run(_serve(sys.stdin.buffer, answers))


if __name__ == "__main__":
    main()
