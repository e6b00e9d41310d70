"""A wire tap for stdio: ``python -m mcp_lab.runners.stdio_tap --out FILE -- CMD ARGS``.

It runs ``CMD ARGS`` and passes its stdin and stdout through unchanged, a line at a
time (stdio MCP is one JSON-RPC message a line), keeping each message, each way, with
the time it passed, as :class:`mcp_lab.runners.wire.WireMessage` lines in ``FILE``
(written as they pass). Its stderr is the command's. The bridges runner puts it between
the reference client and a bridge that speaks stdio to its client, and between a bridge
and the lab's stdio server; the clients runner between a client and the lab's stdio
server. ``--env-file`` (a JSON object) adds to the command's environment (the lab's
Redis and settings, whatever the client passes on); ``--log FILE`` appends the
command's stderr (the lab's log lines) to FILE instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from mcp_lab.runners.wire import CLIENT, LAB, messages_in, to_jsonl

STDIO = "stdio"  # the ``http`` of a stdio message
# A stdio message's ``exchange``: this tap's process, one per connection. A client that
# starts the server twice has two, and request ids that repeat across them stay apart.
CONNECTION = os.getpid()
_LINE_LIMIT = 16 * 1024 * 1024
_STOP_SECONDS = 10.0


def _record(line: bytes, sender: str, out: IO[str]) -> None:
    try:
        payload = json.loads(line)
    except ValueError:
        return
    out.write(to_jsonl(messages_in(payload, sender, CONNECTION, STDIO, None, None)))
    out.flush()


async def _pump(
    read: asyncio.StreamReader, write: Callable[[bytes], None], sender: str, out: IO[str]
) -> None:
    while line := await read.readline():
        _record(line, sender, out)
        write(line)


async def run(
    argv: list[str], out: IO[str], env: dict[str, str], log: IO[str] | None = None
) -> int:
    """Run ``argv`` with its stdin and stdout passed through and recorded (its stderr
    into ``log`` when given); its exit code."""
    loop = asyncio.get_running_loop()
    child = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        limit=_LINE_LIMIT, stderr=log,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    stdin = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, child.terminate)
    to_child = child.stdin

    def to_server(line: bytes) -> None:
        to_child.write(line)

    def to_client(line: bytes) -> None:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()

    requests = asyncio.create_task(_pump(stdin, to_server, CLIENT, out))
    answers = asyncio.create_task(_pump(child.stdout, to_client, LAB, out))
    done, _ = await asyncio.wait({requests, answers}, return_when=asyncio.FIRST_COMPLETED)
    if requests in done:  # the client closed its side: so does the tap
        with contextlib.suppress(OSError):
            child.stdin.close()
    try:
        await asyncio.wait_for(child.wait(), _STOP_SECONDS)
    except TimeoutError:
        child.kill()
        await child.wait()
    for task in (requests, answers):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await task
    return child.returncode if child.returncode is not None else -1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_lab.runners.stdio_tap")
    parser.add_argument("--out", type=Path, required=True, help="the capture (JSON lines)")
    parser.add_argument("--env-file", type=Path, default=None, help="a JSON object of variables")
    parser.add_argument("--log", type=Path, default=None, help="the command's stderr, appended")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run (-- CMD ARGS)")
    env = dict(os.environ)
    if args.env_file is not None:
        env.update({str(k): str(v) for k, v in json.loads(args.env_file.read_text()).items()})
    with contextlib.ExitStack() as files:
        out = files.enter_context(args.out.open("a"))
        log = files.enter_context(args.log.open("a")) if args.log is not None else None
        return asyncio.run(run(command, out, env, log))


if __name__ == "__main__":
    sys.exit(main())
