"""The server leaves FastMCP's own spans out unless FASTMCP_TELEMETRY_MODE chose a mode
(services/mcp_lab/server/run.py, ``no_fastmcp_spans``; docs/performance.md)."""

import fastmcp
from fastmcp.settings import Settings

from mcp_lab.server.run import no_fastmcp_spans


def test_no_spans_by_default(monkeypatch):
    monkeypatch.delenv("FASTMCP_TELEMETRY_MODE", raising=False)
    monkeypatch.setattr(fastmcp, "settings", Settings(_env_file=None))
    assert fastmcp.settings.telemetry_mode == "native"
    no_fastmcp_spans()
    assert fastmcp.settings.telemetry_mode == "propagation_only"


def test_the_mode_a_user_chose_is_kept(monkeypatch):
    monkeypatch.setenv("FASTMCP_TELEMETRY_MODE", "native")
    monkeypatch.setattr(fastmcp, "settings", Settings(_env_file=None))
    no_fastmcp_spans()
    assert fastmcp.settings.telemetry_mode == "native"
