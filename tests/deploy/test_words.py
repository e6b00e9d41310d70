"""What users read holds no word from inside the project: no "seed" (what the lab was
first asked to be) in the user docs, the scenarios' summaries or their checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_lab.scenarios import registry

ROOT = Path(__file__).resolve().parents[2]
# Maintainers' notes (docs/dev/) may name the project's history; a user doc does not.
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INSIDE = re.compile(r"\bseed(?:'s)?\b", re.IGNORECASE)


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_a_user_doc_says_nothing_of_the_seed(doc: Path) -> None:
    found = [
        f"{doc.name}:{number}: {line.strip()}"
        for number, line in enumerate(doc.read_text().splitlines(), 1)
        if INSIDE.search(line)
    ]
    assert not found, found


def test_no_scenario_summary_names_the_seed() -> None:
    for name in registry.names():
        assert not INSIDE.search(registry.get(name).summary), name
