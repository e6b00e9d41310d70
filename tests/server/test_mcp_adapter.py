"""The SDK versions the adapter was checked against are the ones installed and pinned."""

from __future__ import annotations

import tomllib

from mcp_lab.server import mcp_adapter
from tests.support.lab import ROOT


def test_the_installed_sdk_is_the_one_the_adapter_was_checked_against() -> None:
    assert mcp_adapter.unchecked_versions() == [], (
        "fastmcp/mcp changed: re-check every private access and every behaviour listed in "
        "services/mcp_lab/server/mcp_adapter/, then update CHECKED_VERSIONS and the pins"
    )


def test_pyproject_pins_exactly_the_checked_versions() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name, version in mcp_adapter.CHECKED_VERSIONS.items():
        assert f"{name}=={version}" in dependencies, f"pyproject.toml does not pin {name}"
