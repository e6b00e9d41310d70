"""What a kept row says for the export to ``mcp-client-capabilities``: the ``clientInfo``
name the client sent, and the lab's evidence in a form fit to share.

The name sent: a row kept by a lab of history schema 4 on holds it
(``ClientEntry.client_info``, ``NAME/VERSION``). Of an older row: a row whose client
sent another name than its client file expects says so in a note,
``sent clientInfo NAME/VERSION (expected EXPECTED)`` (written by
:mod:`mcp_lab.runners.clients.verdict`, several ``NAME/VERSION`` joined by ``, `` when
several clients connected); a row of a client that connected without such a note sent
the name its client file expects. The evidence names no local path: each run folder is
given from its invocation's folder on (``20261202T101500Z-4242/kilo-7.7.7/single/...``,
relative to the lab's clients runs folder, ``<clients cache>/runs`` or
``$MCP_LAB_RUNS/clients``), and a client run from a command of its own gets a package
URL of its name, never of the command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from mcp_lab.runners.clients import history
from mcp_lab.runners.clients.definition import NPM, PYPI, ClientDef

SENT_NOTE = "sent clientInfo "
_EXPECTED = " (expected "
# An invocation's folder (mcp_lab.runners.run_folders): <UTC stamp>-<pid>[-n].
_INVOCATION = re.compile(r"\d{8}T\d{6}Z-\d+(-\d+)?")


def sent_names(entry: history.ClientEntry, expected: str | None) -> list[str] | None:
    """The clientInfo names the row's note says were sent instead of the expected one
    (each once, in the note's order); None when no note says so."""
    for note in entry.notes:
        if not note.startswith(SENT_NOTE) or not note.endswith(")"):
            continue
        told = note[len(SENT_NOTE) : -1]
        mine = f"{_EXPECTED}{expected}" if expected is not None else None
        if mine and told.endswith(mine):
            told = told[: -len(mine)]
        elif (at := told.rfind(_EXPECTED)) >= 0:
            told = told[:at]
        else:
            continue
        # Each is NAME/VERSION: the name is all before the last "/" (a name may have
        # one of its own: "@cline/core/3.0.65").
        names = [pair.rpartition("/")[0] or pair for pair in told.split(", ")]
        return list(dict.fromkeys(names))
    return None


def connected(entry: history.ClientEntry) -> bool:
    return entry.answers.get("connected") == "yes"


def shared_runs(entry: history.ClientEntry) -> dict[str, str]:
    """The row's run folders, each from its invocation's folder on (else from its
    ``<client>-<version>`` folder on, else its own name): never a local path."""
    out: dict[str, str] = {}
    for run, folder in entry.runs.items():
        parts = PurePosixPath(folder).parts
        start = next((i for i, p in enumerate(parts) if _INVOCATION.fullmatch(p)), None)
        if start is None:
            start = next(
                (i for i, p in enumerate(parts) if p == f"{entry.client}-{entry.version}"),
                len(parts) - 1,
            )
        out[run] = "/".join(p for p in parts[max(start, 0) :] if p != "/")
    return out


def evidence(entry: history.ClientEntry, *, local: bool = False) -> dict[str, Any]:
    """Where the row came from: run, date, lab version, its folders (relative, for a
    file to share; ``local``: as kept, for this machine's user)."""
    keys = ("client", "version", "scenario", "setup", "transport", "level", "recorded",
            "lab_version", "source")  # fmt: skip
    found: dict[str, Any] = {key: getattr(entry, key) for key in keys}
    found["runs"] = dict(entry.runs) if local else shared_runs(entry)
    return {**found, "history": f"mcp-lab clients history --client {shlex.quote(entry.client)}"}


def package_url(spec: ClientDef | None, entry: history.ClientEntry) -> str:
    """A package URL (purl) for a client the database lacks (its url is required): of
    its npm or PyPI package, else of its name (a command's path stays on this machine;
    no client file known: the row's client)."""
    version = quote(entry.version)
    if spec is not None and spec.source in (NPM, PYPI) and spec.package:
        kind = "npm" if spec.source == NPM else "pypi"
        return f"pkg:{kind}/{quote(spec.package, safe='/')}@{version}"
    return f"pkg:generic/{quote(spec.name if spec else entry.client, safe='')}@{version}"
