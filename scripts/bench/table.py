"""The benchmark's table: its rows, their cells, the figures in them."""

from __future__ import annotations

from dataclasses import dataclass


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 if ordered else float("nan")


def ratio(lab: float, floor: float) -> str:
    return f"{lab / floor:.1f}x" if floor else "-"


def share(lab: float, peer: float) -> str:
    """The lab's figure divided by the peer's (>= 1: a rate at least the peer's)."""
    return f"{lab / peer:.2f}" if peer else "-"


@dataclass
class Row:
    """One line of the table. ``vs_floor``: the lab against the floor; with ``--peer``,
    ``peer`` is the peer's cell and ``vs_peer`` the lab's figure divided by it."""

    measure: str
    lab: str
    floor: str
    vs_floor: str = ""
    peer: str = "-"
    vs_peer: str = ""


def print_table(rows: list[Row], with_peer: bool) -> None:
    if with_peer:
        print("| measure | lab | peer | floor | lab / floor | lab / peer |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r.measure} | {r.lab} | {r.peer} | {r.floor} | {r.vs_floor} | {r.vs_peer} |")
        return
    print("| measure | lab | floor | lab / floor |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r.measure} | {r.lab} | {r.floor} | {r.vs_floor} |")


def _peer_cells(peer: float | None, lab: float, form: str) -> tuple[str, str]:
    """The peer's cell and the lab's figure divided by it ("-" without a peer)."""
    return ("-", "") if peer is None else (form.format(peer), share(lab, peer))
