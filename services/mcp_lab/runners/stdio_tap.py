"""A wire tap for stdio: ``python -m mcp_lab.runners.stdio_tap --out FILE -- CMD ARGS``.

It runs ``CMD ARGS`` and passes its stdin and stdout through unchanged, a line at a
time (stdio MCP is one JSON-RPC message a line), keeping each message, each way, with
the time it passed, as :class:`mcp_lab.runners.wire.WireMessage` lines in ``FILE``
(written as they pass). A line over 16 MiB is dropped, not held; a line that is no JSON
is passed on unrecorded; the tap says each in the lab's log (bounded), and at its end
how many of each there were (:func:`row_notes` reads that back, for a row's notes). Its stderr is
the command's. The bridges runner puts it between the reference client and a bridge
that speaks stdio to its client, and between a bridge and the lab's stdio server; the
clients runner between a client and the lab's stdio server. ``--env-file`` (a JSON
object) adds to the command's environment (the lab's Redis and settings, whatever the
client passes on); ``--log FILE`` appends the command's stderr (the lab's log lines)
to FILE instead, and the tap's own notes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

from mcp_lab import untrusted
from mcp_lab.runners.wire import CLIENT, LAB, messages_in, to_jsonl

STDIO = "stdio"  # the ``http`` of a stdio message
# A stdio message's ``exchange``: this tap's process, one per connection. A client that
# starts the server twice has two, and request ids that repeat across them stay apart.
CONNECTION = os.getpid()
_LINE_LIMIT = 16 * 1024 * 1024
_STOP_SECONDS = 10.0


_CHUNK = 64 * 1024
_SHOWN_BAD_LINES = 3  # lines that are not JSON, quoted each way (then only counted)
_EXCERPT_CHARS = 200
_NOTE_EXCERPT_CHARS = 120  # what a row's note quotes of the first such line
_PREFIX = "mcp-lab stdio tap: "
_BAD = "wrote a line that is no JSON-RPC message: "
# The tap's last words on a side (one line each): what row_notes reads back.
_SUMMARY = re.compile(
    r"in all, the (?P<sender>\w+) wrote (?P<bad>\d+) line\(s\) that are no JSON-RPC message "
    r"and (?P<over>\d+) over the tap's limit \(the longest (?P<longest>\d+) bytes\)"
)
_DROPPED = re.compile(r"the (?P<sender>\w+) wrote a line of (?P<size>\d+) bytes, over the tap")
_SENDERS = {CLIENT: "the client wrote to the server", LAB: "the lab's server wrote to the client"}


class _Notes:
    """What the tap says of a side's lines it cannot pass as messages: into the lab's
    log when it has one (``--log``), else on stderr; bounded."""

    def __init__(self, log: IO[str] | None) -> None:
        self._log = log
        self.not_json: dict[str, int] = {}
        self.over: dict[str, list[int]] = {}  # the sizes of the lines dropped, each side

    def say(self, text: str) -> None:
        line = f"{_PREFIX}{text}\n"
        if self._log is not None:
            self._log.write(line)
            self._log.flush()
        else:
            sys.stderr.write(line)
            sys.stderr.flush()

    def bad_line(self, line: bytes, sender: str) -> None:
        seen = self.not_json[sender] = self.not_json.get(sender, 0) + 1
        if seen <= _SHOWN_BAD_LINES:
            text = untrusted.shown(line.decode("utf-8", "replace").rstrip("\n"), _EXCERPT_CHARS)
            self.say(f"the {sender} {_BAD}{text}")

    def dropped(self, size: int, sender: str) -> None:
        self.over.setdefault(sender, []).append(size)
        self.say(f"the {sender} wrote a line of {size} bytes, over the tap's limit of "
                 f"{_LINE_LIMIT} bytes: dropped, not passed on")  # fmt: skip

    def summary(self) -> None:
        """How many lines of each side were no message or too long, once the tap ends."""
        for sender in sorted({*self.not_json, *self.over}):
            over = self.over.get(sender, [])
            self.say(f"in all, the {sender} wrote {self.not_json.get(sender, 0)} line(s) that "
                     f"are no JSON-RPC message and {len(over)} over the tap's limit (the "
                     f"longest {max(over, default=0)} bytes)")  # fmt: skip


def row_notes(lines: list[str]) -> list[str]:
    """What a row says of the lines the taps of its run could not pass as messages,
    from the tap's lines in the lab's log (``lines``: every connection's, summed): how
    many lines each side wrote that are no JSON-RPC message (the first quoted, cut,
    escaped as the log has it) and how many were past the tap's limit. A tap that was
    killed before its last words is counted by the lines it said on the way."""
    summed = {sender: [0, 0, 0] for sender in _SENDERS}  # no message, over, the longest
    said = {sender: [0, 0, 0] for sender in _SENDERS}
    first: dict[str, str] = {}
    for line in lines:
        if not line.startswith(_PREFIX):
            continue
        text = line[len(_PREFIX) :]
        if (found := _SUMMARY.match(text)) and found["sender"] in summed:
            counts = summed[found["sender"]]
            counts[0] += int(found["bad"])
            counts[1] += int(found["over"])
            counts[2] = max(counts[2], int(found["longest"]))
        elif (found := _DROPPED.match(text)) and found["sender"] in said:
            counts = said[found["sender"]]
            counts[1] += 1
            counts[2] = max(counts[2], int(found["size"]))
        for sender in _SENDERS:
            if text.startswith(f"the {sender} {_BAD}"):
                said[sender][0] += 1
                first.setdefault(sender, text[len(f"the {sender} {_BAD}") :])
    notes = []
    for sender, whose in _SENDERS.items():
        bad, over, longest = (max(a, b) for a, b in zip(summed[sender], said[sender], strict=True))
        if bad:
            quoted = untrusted.cut(first.get(sender, "?"), _NOTE_EXCERPT_CHARS)
            notes.append(f"{bad} line(s) {whose} were not JSON-RPC (the first: "
                         f"{quoted}): passed on, not recorded")  # fmt: skip
        if over:
            notes.append(f"{over} line(s) {whose} were over the tap's limit of "
                         f"{_LINE_LIMIT // (1024 * 1024)} MiB (the longest {longest} "
                         "bytes): dropped, not passed on")  # fmt: skip
    return notes


def _record(line: bytes, sender: str, out: IO[str], notes: _Notes) -> None:
    try:
        payload = json.loads(line)
    except ValueError:
        notes.bad_line(line, sender)
        return
    out.write(to_jsonl(messages_in(payload, sender, CONNECTION, STDIO, None, None)))
    out.flush()


async def _lines(read: asyncio.StreamReader) -> AsyncIterator[tuple[bytes | None, int]]:
    """Each line as it comes, with its newline (a last one without); a line over
    :data:`_LINE_LIMIT` bytes is never held whole: it comes as ``(None, its size)``
    once it ends, or once the stream does."""
    pending = bytearray()
    over = 0  # the size of a line past the limit, so far (its bytes dropped)
    while chunk := await read.read(_CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            piece = chunk[start : end + 1]
            if over or len(pending) + len(piece) > _LINE_LIMIT:
                yield None, over + len(pending) + len(piece)
            else:
                pending += piece
                yield bytes(pending), 0
            pending.clear()
            over, start = 0, end + 1
        rest = chunk[start:]
        if over or len(pending) + len(rest) > _LINE_LIMIT:
            over += len(pending) + len(rest)
            pending.clear()
        else:
            pending += rest
    if over:
        yield None, over
    elif pending:
        yield bytes(pending), 0


async def _pump(
    read: asyncio.StreamReader,
    write: Callable[[bytes], None],
    sender: str,
    out: IO[str],
    notes: _Notes,
) -> None:
    async for line, size in _lines(read):
        if line is None:
            notes.dropped(size, sender)
            continue
        _record(line, sender, out, notes)
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

    notes = _Notes(log)
    requests = asyncio.create_task(_pump(stdin, to_server, CLIENT, out, notes))
    answers = asyncio.create_task(_pump(child.stdout, to_client, LAB, out, notes))
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
    notes.summary()
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
