"""The clients the lab knows how to run, with the versions it pins: the client files
of ``services/mcp_lab/runners/clients/defs/`` (one per client, :mod:`mcp_lab.runners.clients.
definition`), and a user's own given with ``--client-file``.

Pins are the versions checked by hand (see docs/clients.md); ``--version NAME=X`` runs
another one. Every npm package is installed into its own prefix under the cache, so
versions never mix.
"""

from __future__ import annotations

from pathlib import Path

from mcp_lab.runners.clients.definition import ClientDef, builtin, load_client
from mcp_lab.runners.definitions import with_files

CLIENTS: dict[str, ClientDef] = builtin()


def known() -> str:
    return ", ".join(CLIENTS)


def clients_with_files(files: list[Path]) -> dict[str, ClientDef]:
    """The built-in clients and those of ``files`` (a file may not take a built-in's name);
    DefinitionError for a file that cannot be used."""
    return with_files(CLIENTS, files, load_client)
