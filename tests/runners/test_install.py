"""mcp_lab.runners.install: what the runners install from the registries."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcp_lab.runners.install import npm_install, pypi_latest
from tests.support.ci import IN_CI


def test_the_newest_version_of_a_package_with_extras_is_that_of_its_name() -> None:
    assert pypi_latest("pydantic-ai-slim[mcp]") == pypi_latest("pydantic-ai-slim")


def test_a_package_that_links_no_program_is_found_by_its_path_under_node_modules(
    tmp_path: Path,
) -> None:
    if shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true and no npm on PATH")
        pytest.skip("no npm on PATH")
    found = npm_install("is-number", "is-number", "7.0.0", "is-number/index.js", cache=tmp_path)
    assert found == tmp_path / "is-number-7.0.0" / "node_modules" / "is-number" / "index.js"
    assert found.is_file()
