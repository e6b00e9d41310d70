"""services.runners.install: what the runners install from the registries."""

from __future__ import annotations

from services.runners.install import pypi_latest


def test_the_newest_version_of_a_package_with_extras_is_that_of_its_name() -> None:
    assert pypi_latest("pydantic-ai-slim[mcp]") == pypi_latest("pydantic-ai-slim")
