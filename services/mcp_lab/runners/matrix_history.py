"""The matrix history as the dashboard shows it (``/api/matrix``): the cells of each kind
of program under test, read from the one history file.

The history is one piece of code for every kind (:mod:`mcp_lab.runners.history_kinds`);
the kinds are given (``mcp-lab server`` gives the clients' and the bridges', from
their own modules): this module, like the rest of the runners' shared code, imports
neither the clients' nor the bridges' code. The server is given a function of no
arguments that calls :func:`matrix` when ``mcp-lab server`` starts it; the server wing
itself never imports the runners.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp_lab.runners.history_kinds import HistoryKind


def matrix(
    first: HistoryKind[Any, Any, Any], *others: HistoryKind[Any, Any, Any], path: Path | None = None
) -> dict[str, Any]:
    """The ``first`` kind's matrix (:meth:`HistoryKind.matrix`) with each of the
    ``others``' programs beside its own (under the kind's ``plural``: ``bridges``) and
    their other keys named after their kind (``steps``: ``bridge_steps``)."""
    data = first.matrix(path)
    for kind in others:
        theirs = kind.matrix(path)
        data[kind.plural] = theirs.pop(kind.plural)
        data.update({f"{kind.name}_{key}": value for key, value in theirs.items()})
    return data
