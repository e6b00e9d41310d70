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


def test_what_a_client_printed_is_cut_and_escaped_in_the_table_and_its_notes() -> None:
    """A version with ESC and a newline (a CLI printed it) and a note quoting it: the
    terminal gets one line each, escaped, cut (they reached it raw)."""
    (row, _) = _rows()
    row.version = "1.0\x1b[2J\nPASS forged" + "9" * 200
    row.notes = ["sent clientInfo \x07evil\nmcp-lab: forged line"]
    table = CLIENT_MATRIX.table([row])
    assert "\x1b" not in table and "\x07" not in table, table
    assert not any(line.startswith(("PASS", "mcp-lab:")) for line in table.splitlines())
    assert "1.0\\x1b[2J\\nPASS forged" in table and "9" * 61 not in table
    markdown = CLIENT_MATRIX.markdown([row])
    assert "\x1b" not in markdown and len(markdown.splitlines()) == 3
