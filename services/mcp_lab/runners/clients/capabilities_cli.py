"""``mcp-lab clients export`` and ``mcp-lab clients declared``: the subcommands of
:mod:`mcp_lab.runners.clients.capabilities`.

``export --output FILE`` writes the database's shape to FILE and the lab's evidence of
each entry beside it, ``<stem>.mcp-subscribe-lab.json`` (``--lab-output`` for another
file): the types of ``McpClientRecord`` take no key of the lab's. Both commands take
``--client-file`` for the clients run from a user's own file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcp_lab import untrusted
from mcp_lab.runners.clients import history
from mcp_lab.runners.clients.capabilities import (
    FORMAT,
    LAB_KEY,
    PACKAGE,
    PIN,
    Database,
    DatabaseError,
    Observed,
    client_files,
    declared,
    declared_table,
    export,
    lab_file,
    load,
    observed,
)
from mcp_lab.runners.clients.definition import DefinitionError
from mcp_lab.runners.history_store import history_path
from mcp_lab.runners.install import InstallError

_NOTE_CHARS = 400  # a note on stderr, at most (each one line, its controls escaped)


def add_parsers(actions: argparse._SubParsersAction) -> None:
    """Add ``export`` and ``declared`` to ``mcp-lab clients``."""
    version_help = (
        f"the version of the npm package {PACKAGE} to read (default {PIN}, the "
        "pin; latest: npm's newest), installed once into the clients' cache"
    )
    file_help = (
        "a client file of your own that rows were run from (clients run --client-file); "
        "repeatable. Its client_info is the name a row's client sent unless the row says "
        "it sent another"
    )
    export_parser = actions.add_parser(
        "export",
        help=f"write the clients the lab has run in the shape of the {PACKAGE} database, "
        "from their latest observed rows",
    )
    export_parser.add_argument(
        "--format",
        choices=[FORMAT],
        default=FORMAT,
        help=f"{FORMAT}: its JSON, keyed by the clientInfo name each client sent (default)",
    )
    export_parser.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"write here (default: stdout); the lab's evidence goes beside it, in "
        f"<stem>.{LAB_KEY}.json",
    )
    export_parser.add_argument(
        "--lab-output",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the lab's evidence of each entry here (default: beside --output; "
        "with stdout, not written)",
    )
    export_parser.add_argument("--client-file", action="append", default=[], type=Path,
                               metavar="PATH", help=file_help)  # fmt: skip
    export_parser.add_argument("--database-version", default=PIN, metavar="V", help=version_help)
    export_parser.set_defaults(func=_cmd_export)

    table = actions.add_parser(
        "declared",
        help=f"per client the lab has run: what {PACKAGE} declares for the clientInfo it "
        "sent against what the lab observed (resources, subscribe, listChanged)",
    )
    table.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table: a line per client, declared/observed (default); json: each comparison",
    )
    table.add_argument("--client-file", action="append", default=[], type=Path,
                       metavar="PATH", help=file_help)  # fmt: skip
    table.add_argument("--database-version", default=PIN, metavar="V", help=version_help)
    table.set_defaults(func=_cmd_declared)


def _read(args: argparse.Namespace) -> tuple[Database, dict[str, Observed]] | int:
    """The database and the observed rows; else the exit code after saying why not (on
    stderr): 2 for a client file that cannot be used, 1 for the rest."""
    try:
        files = client_files(args.client_file)
    except DefinitionError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    where = history_path()
    found = observed(history.CLIENT_HISTORY.read(where), files)
    if not found:
        print(
            f"mcp-lab: no clients run kept yet in {where} (mcp-lab clients run keeps each "
            "row there)",
            file=sys.stderr,
        )
        return 1
    try:
        return load(args.database_version), found
    except InstallError as exc:
        lines = str(exc).splitlines()
        why = next((ln.strip() for ln in lines[1:] if "error" in ln.lower()), lines[0])
        print(
            f"mcp-lab: the client database {PACKAGE}@{args.database_version} could not be "
            f"installed ({why}); it is read from the npm registry at run time",
            file=sys.stderr,
        )
    except DatabaseError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
    return 1


def _cmd_export(args: argparse.Namespace) -> int:
    read = _read(args)
    if isinstance(read, int):
        return read
    db, found = read
    try:
        out, lab, notes = export(found, db)
    except DatabaseError as exc:
        print(f"mcp-lab: the export fails {PACKAGE}'s types: "
              f"{untrusted.shown(str(exc), _NOTE_CHARS)}", file=sys.stderr)  # fmt: skip
        return 1
    lab_out = args.lab_output or (lab_file(args.output) if args.output else None)
    for note in notes:  # a note names clients, and a client chose its clientInfo name
        print(f"mcp-lab: {untrusted.shown(note, _NOTE_CHARS)}", file=sys.stderr)
    text = json.dumps(out, indent=2) + "\n"
    evidence = {"database": f"{PACKAGE}@{db.version}", "clients": lab}
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(
            f"wrote {len(out)} client(s) to {args.output} ({PACKAGE} {db.version}'s shape, "
            "checked against its types)",
            file=sys.stderr,
        )
    if lab_out is None:
        print("mcp-lab: the lab's evidence of each entry is written with --output FILE "
              "(beside it) or --lab-output FILE", file=sys.stderr)  # fmt: skip
    else:
        lab_out.write_text(json.dumps(evidence, indent=2) + "\n")
        print(f"wrote the lab's evidence of each entry to {lab_out}", file=sys.stderr)
    return 0


def _cmd_declared(args: argparse.Namespace) -> int:
    read = _read(args)
    if isinstance(read, int):
        return read
    db, found = read
    rows = declared(found, db)
    if args.format == "json":
        info = {"package": PACKAGE, "version": db.version, "clients": len(db.clients)}
        print(json.dumps({"database": info, "clients": rows}, indent=2))
    else:
        print(declared_table(rows, db))
    return 0
