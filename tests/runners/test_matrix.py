"""The runners' terminal table (services/mcp_lab/runners/matrix.py): its columns when
they fit, a block per row on a narrower terminal (17 columns ran to 175-313 characters)."""

from __future__ import annotations

from mcp_lab.runners.clients.matrix import CHECKLIST, CLIENT_MATRIX, Check, ClientRow


def _rows() -> list[ClientRow]:
    rows = []
    for transport in ("http", "stdio"):
        row = ClientRow(
            "typescript-sdk", "1.32.2", "single", "no tool", transport=transport,
            protocol="2025-11-25", level=6, server_level=6,
        )  # fmt: skip
        row.checklist = {key: Check("yes", 0.4) for key in CHECKLIST}
        row.notes = ["whether the new content reached the model (level 7) is not visible " * 3]
        rows.append(row)
    return rows


def test_a_table_wider_than_the_terminal_is_a_block_per_row() -> None:
    wide = CLIENT_MATRIX.table(_rows())
    assert max(len(line) for line in wide.splitlines()) > 100  # its columns, one line a row
    narrow = CLIENT_MATRIX.table(_rows(), width=100)
    lines = narrow.splitlines()
    assert max(len(line) for line in lines) <= 100, narrow
    assert lines[0] == "typescript-sdk · 1.32.2 · single · no tool · http · 2025-11-25"
    assert lines[1].startswith("    level 6 re-read · connect yes 0.4s · ")
    assert "typescript-sdk · 1.32.2 · single · no tool · stdio · 2025-11-25" in lines
    assert "re-read yes 0.4s" in narrow and "pull yes 0.4s" in narrow


def test_a_table_that_fits_keeps_its_columns() -> None:
    assert CLIENT_MATRIX.table(_rows(), width=400) == CLIENT_MATRIX.table(_rows())
