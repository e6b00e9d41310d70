"""The matrix history as the dashboard shows it (``/api/matrix``): the clients' cells
and the bridges' cells, read from the one history file.

The server is given :func:`matrix` when ``mcp-lab server`` starts it; the server wing
itself never imports the runners.
"""

from __future__ import annotations

from typing import Any

from mcp_lab.runners.bridges import history as bridges_history
from mcp_lab.runners.clients import history as clients_history


def matrix() -> dict[str, Any]:
    """The clients' matrix (:func:`mcp_lab.runners.clients.history.matrix`) with the
    bridges' cells in ``bridges`` and their steps' titles in ``bridge_steps``."""
    data = clients_history.matrix()
    bridges = bridges_history.matrix()
    data["bridges"], data["bridge_steps"] = bridges["bridges"], bridges["steps"]
    return data
