"""``mcp-lab connect CLIENT``: the configuration that points CLIENT at the running lab.

What it prints comes from the client's file (``services/mcp_lab/runners/clients/defs/
CLIENT.toml``), its ``[connect]`` table (:mod:`mcp_lab.runners.clients.connecting`):
where the snippet goes, its language, the command that starts the client, and notes.
The snippet itself is either the part of a config writer that names the lab
(``[connect] writer``, one of ``mcp_lab.runners.clients.configs.SNIPPETS``), so what a
person pastes is what the lab's own runs write, or the file's own ``template`` for a
client the lab has no writer for (Goose, Crush, and the editors VS Code and Cursor,
files of kind ``editor`` that ``clients run`` leaves out). Notes that depend on the
folder ``connect`` runs in are code, named by ``[connect] notes_from`` (Gemini CLI's
folder trust: ``gemini_folder_trust``).

A client becomes connectable by a ``[connect]`` table in its file; every file that has
one is a choice of ``mcp-lab connect``. ``--client-file PATH`` does the same for a
client file of one's own.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from mcp_lab.runners.clients.connecting import Connection, Here
from mcp_lab.runners.clients.definition import ClientDef, DefinitionError, connectable, load_client

CLIENTS: dict[str, ClientDef] = connectable()


def from_file(path: Path) -> ClientDef:
    """The client of a client file of one's own; DefinitionError when it cannot be
    used or has no ``[connect]`` table."""
    client = load_client(path)
    if client.connect is None:
        raise DefinitionError(
            f"{path}: no [connect] table (what connect prints: docs/own-client.md)"
        )
    return client


def connection(client: ClientDef, url: str, here: Here) -> Connection:
    """What ``connect`` says for ``client`` (a file with a ``[connect]`` table)."""
    assert client.connect is not None
    return client.connect.connection(client.title, url, here)


def to_text(connection: Connection, url: str) -> str:
    notes = [
        f"# {line}"
        for note in connection.notes
        for line in textwrap.wrap(note, 86, break_on_hyphens=False)
    ]
    return "\n".join(
        [
            f"# {connection.title} -> the lab at {url}",
            f"# in {connection.file}:",
            connection.snippet(),
            "",
            *notes,
            f"# then start it: {connection.start}",
            "# and read how far it got: mcp-lab report",
        ]
    )


def render(client: ClientDef, url: str, as_json: bool, here: Here) -> str:
    """The text (or JSON) ``connect`` prints for ``client``, run in ``here``."""
    made = connection(client, url, here)
    if as_json:
        return json.dumps({"client": client.name, "url": url, **made.__dict__}, indent=2)
    return to_text(made, url)


def main(client: str | ClientDef, url: str, as_json: bool) -> int:
    """Print the configuration that points ``client`` (a built-in's name, or a client
    file's client) at ``url`` (the lab the caller named on stderr)."""
    chosen = CLIENTS[client] if isinstance(client, str) else client
    print(render(chosen, url, as_json, Here(Path.cwd(), Path.home(), os.environ)))
    return 0
