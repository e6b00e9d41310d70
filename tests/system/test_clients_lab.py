"""The clients and bridges runners' lab (services/mcp_lab/runners/lab.py): real processes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mcp_lab.process.embedded_redis import free_port
from mcp_lab.runners import lab

pytestmark = [pytest.mark.anyio, pytest.mark.process]


async def test_a_free_port_taken_before_the_server_binds_it_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs side by side pick free ports that another process may take first: the
    server says it could not listen, and the lab starts it again on another port."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    busy = taken.getsockname()[1]
    ports = iter([free_port(), busy])  # Redis's port, then the server's first: taken
    monkeypatch.setattr(lab, "free_port", lambda: next(ports, None) or free_port())
    try:
        async with lab.running_lab(tmp_path) as running:
            assert running.base_url != f"http://127.0.0.1:{busy}"
            assert any("server ready" in line for line in running.server.lines)
    finally:
        taken.close()
