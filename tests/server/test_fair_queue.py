"""The fair queue: one item of each owner per round, owners in turn."""

from __future__ import annotations

from mcp_lab.server.fair_queue import FairQueue


def test_a_round_takes_one_item_of_each_owner_in_the_order_they_came() -> None:
    queue: FairQueue[str] = FairQueue()
    for at in range(3):
        queue.put("flooder", f"f{at}")
    queue.put("victim", "v0")
    assert len(queue) == 4 and queue.owners() == 2
    assert queue.round(10) == ["f0", "v0"]
    assert queue.round(10) == ["f1"]
    assert queue.round(10) == ["f2"]
    assert len(queue) == 0 and queue.round(10) == []


def test_owners_left_out_of_a_round_come_first_in_the_next() -> None:
    queue: FairQueue[str] = FairQueue()
    for owner in "abcd":
        queue.put(owner, f"{owner}0")
        queue.put(owner, f"{owner}1")
    assert queue.round(3) == ["a0", "b0", "c0"]
    # d waited: it comes before a, b and c get their second turn.
    assert queue.round(3) == ["d0", "a1", "b1"]
    assert queue.round(3) == ["c1", "d1"]
    assert len(queue) == 0


def test_an_owner_with_thousands_of_items_delays_a_newcomer_by_one_round_at_most() -> None:
    queue: FairQueue[int] = FairQueue()
    for at in range(3000):
        queue.put("flooder", at)
    queue.round(100)  # the flood is under way
    queue.put("victim", -1)
    assert queue.round(100) == [1, -1]
