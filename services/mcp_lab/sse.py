"""Server-sent events, framed in one place.

The lab writes SSE itself in three places: GET streams it serves for resumption
(in the same framing the mcp SDK writes: ``event: message``, ``id:``, ``retry:``,
``data:``), the dashboard's report stream, and the scripted model's streamed
answers. Each event is one call of :func:`frame`.
"""

from __future__ import annotations


def frame(
    data: str | None = None,
    *,
    event: str | None = None,
    event_id: str | None = None,
    retry_ms: int | None = None,
    comment: str | None = None,
) -> bytes:
    """One SSE event: the fields given, in the order event, id, retry, data.

    ``data`` may span lines (each becomes a ``data:`` line); ``data=""`` is a
    data-less event (a priming event has an id and an empty data line); a frame
    with only ``retry_ms`` or only ``comment`` dispatches no event.
    """
    lines = [f": {comment}"] if comment is not None else []
    if event is not None:
        lines.append(f"event: {event}")
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    if data is not None:
        lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()
