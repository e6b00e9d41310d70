"""The lab's log: one line per protocol event, in a fixed, greppable form.

Each event line is ``[tag] detail session=<id> client=<name>/<version>``, for
example ``[resources/read] uri=test://review/status version=1 session=ab12 client=probe/0.1``;
extra fields, when an event has them, follow the client (``... client=probe/0.1 job=...``).
Process lines (start, stop, errors) use ``[lab]``, ``[relay]`` or ``[updater]``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable

from mcp_lab import untrusted
from mcp_lab.contract import Peer

# Every lab logger is a child of this one (``mcp_lab.relay``, ``mcp_lab.updater``, ...),
# so one level set here applies to all of them; the line format never names them.
logger = logging.getLogger("mcp_lab")
_protocol = logging.getLogger("mcp_lab.protocol")


def event(tag: str, detail: str, peer: Peer, extra: str = "", level: int = logging.INFO) -> None:
    """Log one protocol event of ``peer`` (at ``level``); ``extra`` fields go after the client.

    Every part may hold what a client chose (its clientInfo, a URI): each is cut
    and escaped (services/mcp_lab/untrusted.py), so the event is always one line and no
    value in it can pass for another line or a terminal escape."""
    if _protocol.isEnabledFor(level):
        _protocol.log(level, "%s", _event_line(tag, detail, peer, extra))


def events(items: Iterable[tuple[str, str, Peer, str]], level: int = logging.INFO) -> None:
    """Log many protocol events at once (a fan-out's), each ``(tag, detail, peer,
    extra)`` as :func:`event` would: one record, which the lab's formatter writes as
    those lines, in order, with one write (a fan-out to 1,000 sessions logs 2,000
    lines; one record per line cost 30 ms before the first notification left)."""
    if not _protocol.isEnabledFor(level):
        return
    lines = [_event_line(tag, detail, peer, extra) for tag, detail, peer, extra in items]
    if lines:
        _protocol.log(level, "%s", "\n".join(lines), extra={_LINES: lines})


def _event_line(tag: str, detail: str, peer: Peer, extra: str) -> str:
    limit = untrusted.LOG_PART_CHARS
    tail = f" {untrusted.shown(extra, limit)}" if extra else ""
    detail = untrusted.shown(detail, limit)
    session = untrusted.shown(peer.session, limit)
    return f"[{tag}] {detail} session={session} client={untrusted.shown(peer.client, limit)}{tail}"


# The attribute of a record of many lines (events()), each formatted as its own.
_LINES = "mcp_lab_lines"


# How much of a value a log line quotes: text, one raw value, fields of an entry.
_SHOWN_TEXT_CHARS = 200
_SHOWN_VALUE_CHARS = 60
_SHOWN_FIELDS = 6


def shorten(text: str, limit: int = _SHOWN_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters for a log line."""
    return untrusted.cut(text, limit)


def shown(value: bytes | str, limit: int = _SHOWN_VALUE_CHARS) -> str:
    """One value anyone may have written (a payload, a Redis field) for a log line:
    its repr, as text when it is UTF-8, cut to ``limit`` with its size."""
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            pass
    if len(value) <= limit:
        return repr(value)
    unit = "bytes" if isinstance(value, bytes) else "chars"
    return f"{value[:limit]!r}...({len(value)} {unit})"


def shown_fields(raw: dict[bytes, bytes]) -> str:
    """Raw stream entry or hash fields for a log line: the first few, each cut short."""
    items = [f"{shown(k)}: {shown(v)}" for k, v in list(raw.items())[:_SHOWN_FIELDS]]
    if len(raw) > _SHOWN_FIELDS:
        items.append(f"...({len(raw)} fields)")
    return "{" + ", ".join(items) + "}"


# Libraries whose own log lines the lab's log shows, each with the tag it gets there.
_LIBRARY_TAGS = {"uvicorn": "http"}


class OneLineFormatter(logging.Formatter):
    """Each record's message as one line of bounded length, whoever logged it (the
    lab, the SDK, uvicorn): control characters escaped, cut to
    ``untrusted.LOG_MESSAGE_CHARS``; a library's own lines get a ``[tag]`` like the
    lab's. A traceback, when there is one, follows as is."""

    def format(self, record: logging.LogRecord) -> str:
        lines: list[str] | None = getattr(record, _LINES, None)
        if lines is None:
            return super().format(record)
        # Many event lines in one record (events()): each as its own record would be.
        record.asctime = self.formatTime(record, self.datefmt)
        formatted = []
        for line in lines:
            record.message = line
            formatted.append(self.formatMessage(record))
        return "\n".join(formatted)

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = untrusted.cut(record.message, untrusted.LOG_MESSAGE_CHARS)
        record.message = untrusted.escape_controls(message)
        tag = _LIBRARY_TAGS.get(record.name.partition(".")[0])
        if tag is not None:
            record.message = f"[{tag}] {record.message}"
        return super().formatMessage(record)


class Throttled:
    """A line that may repeat often (an attacker, or a burst, can make it), logged at
    most once every ``seconds``; the next one says how many were left out meanwhile."""

    def __init__(self, log: logging.Logger, seconds: float) -> None:
        self._log = log
        self._seconds = seconds
        self._last = float("-inf")
        self._left_out = 0

    def warning(self, message: str, *args: object) -> None:
        self._emit(logging.WARNING, message, *args)

    def info(self, message: str, *args: object) -> None:
        self._emit(logging.INFO, message, *args)

    def _emit(self, level: int, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self._seconds:
            self._left_out += 1
            return
        if self._left_out:
            message += f" (and {self._left_out} more like it in the last {self._seconds:g} s)"
        self._last, self._left_out = now, 0
        self._log.log(level, message, *args)


def setup_logging(level: str) -> None:
    """Log to stderr (stdout stays free for protocol on stdio) with timestamps, in one
    format for the lab's lines and uvicorn's (its ``uvicorn.Config`` gets
    ``log_config=None``, so its loggers reach this handler)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        OneLineFormatter("%(asctime)s.%(msecs)03d %(levelname)-7s %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logger.setLevel(level.upper())  # settings.py accepts only the logging module's names
