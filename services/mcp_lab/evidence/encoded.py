"""A report's JSON encoded once, for every response that sends it.

The dashboard sends one report to every viewer and to ``/api/report``: one bytes
object, the report's JSON framed as one server-sent ``report`` event. Its JSON is a
view into it (:attr:`Encoded.json`), and where each session's JSON lies in it is
kept (:attr:`Encoded.places`), so that one session's picture is read from it
without decoding the rest.

The JSON is written as Starlette's ``JSONResponse`` writes it (compact, UTF-8), in
pieces: each object or array that holds others is written around them, so no one
call of the C encoder runs for long.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

EVENT_HEAD = b"event: report\ndata: "
EVENT_END = b"\n\n"


@dataclass(frozen=True, slots=True)
class Place:
    """Where one session's JSON lies in an encoded report, and whose session it is."""

    start: int
    end: int
    client: str
    version: str


@dataclass(frozen=True, slots=True)
class Encoded:
    """One report, encoded once."""

    event: bytes  # the server-sent event: EVENT_HEAD, the JSON, EVENT_END
    run: str | None  # the run's id (None for a report of a time window)
    places: dict[str, Place]  # by session label: the first session of that label
    build: int = 0  # which build of its server's feed it is

    @property
    def json(self) -> memoryview:
        """The report's JSON: a view into :attr:`event`, not a copy."""
        return memoryview(self.event)[len(EVENT_HEAD) : len(self.event) - len(EVENT_END)]

    def session(self, label: str) -> tuple[dict[str, Any], str, str] | None:
        """The session labelled ``label``, with its client's name and version; None
        when the report has none."""
        place = self.places.get(label)
        if place is None:
            return None
        session: dict[str, Any] = json.loads(self.event[place.start : place.end])
        return session, place.client, place.version


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON, UTF-8 (as ``JSONResponse`` writes it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _pieces(value: Any) -> Iterator[bytes]:
    if isinstance(value, dict) and any(isinstance(v, dict | list) for v in value.values()):
        yield b"{"
        for at, (key, item) in enumerate(value.items()):
            yield (b"," if at else b"") + dumps(str(key)) + b":"
            yield from _pieces(item)
        yield b"}"
    elif isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        yield b"["
        for at, item in enumerate(value):
            if at:
                yield b","
            yield from _pieces(item)
        yield b"]"
    else:
        yield dumps(value)


class _Writer:
    """The pieces of one encoding, and how many bytes so far."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.size = 0

    def put(self, piece: bytes) -> None:
        self.pieces.append(piece)
        self.size += len(piece)

    def value(self, value: Any) -> None:
        for piece in _pieces(value):
            self.put(piece)

    def key(self, at: int, key: str) -> None:
        self.put((b"," if at else b"") + dumps(key) + b":")


def encode(data: dict[str, Any]) -> Encoded:
    """``data`` (a report's JSON, :func:`mcp_lab.evidence.report.to_json`) as one
    server-sent ``report`` event: its JSON on one ``data:`` line (compact JSON holds no
    line break), and where each session lies in it."""
    out = _Writer()
    out.put(EVENT_HEAD + b"{")
    places: dict[str, Place] = {}
    for at, (key, value) in enumerate(data.items()):
        out.key(at, key)
        if key != "clients" or not isinstance(value, list):
            out.value(value)
            continue
        out.put(b"[")
        for client_at, client in enumerate(value):
            out.put(b",{" if client_at else b"{")
            for field_at, (field, item) in enumerate(client.items()):
                out.key(field_at, field)
                if field != "sessions":
                    out.value(item)
                    continue
                out.put(b"[")
                for session_at, session in enumerate(item):
                    if session_at:
                        out.put(b",")
                    start = out.size
                    out.value(session)
                    place = Place(start, out.size, str(client["client"]), str(client["version"]))
                    places.setdefault(str(session.get("session")), place)
                out.put(b"]")
            out.put(b"}")
        out.put(b"]")
    out.put(b"}" + EVENT_END)
    run = (data.get("run") or {}).get("id")
    return Encoded(b"".join(out.pieces), None if run is None else str(run), places)
