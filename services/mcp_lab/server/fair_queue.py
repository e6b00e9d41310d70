"""A queue served fairly: items wait per owner, and each round takes one item of
each owner in turn.

The relay queues each update for the session it is for (services/mcp_lab/server/relay.py):
a session with thousands of due updates then has thousands of items in its own
queue, and another session's one update still goes out in the next round, not
after all of them.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Items per owner, first in first out within an owner; owners served in turn."""

    def __init__(self) -> None:
        # Insertion-ordered: the owners whose turn comes first come first.
        self._queues: dict[str, deque[T]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def put(self, owner: str, item: T) -> None:
        """Queue ``item`` behind ``owner``'s other items."""
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = deque()
        queue.append(item)
        self._size += 1

    def owners(self) -> int:
        """How many owners have items waiting."""
        return len(self._queues)

    def round(self, most: int) -> list[T]:
        """The first item of each owner, owners in turn, at most ``most`` of them; an
        owner served goes to the back, so those left out this round come first next."""
        served = list(islice(self._queues, most))
        items: list[T] = []
        for owner in served:
            queue = self._queues.pop(owner)
            items.append(queue.popleft())
            if queue:
                self._queues[owner] = queue
        self._size -= len(items)
        return items
