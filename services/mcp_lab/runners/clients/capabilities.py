"""The community client database against what the lab observed.

``mcp-client-capabilities`` (npm) is a JSON file keyed by the ``clientInfo`` name a
client sends: its title, url, protocol version and the capabilities its authors
declare (``resources: {subscribe, listChanged}``, ...), declared by hand and never
observed. The lab reads it as data at run time: the npm package at :data:`PIN` (or
``--database-version``), installed once into the clients' cache, its data
(``dist/mcp_client_capabilities/mcp-clients.json``) and its own types
(``dist/types.d.ts``, read into a JSON Schema here) taken from there. The npm package,
not PyPI's: PyPI's needs Python 3.12 (the lab runs on 3.11), and its types name the keys
``list_changed`` and ``protocol_version`` where its JSON has ``listChanged`` and
``protocolVersion``.

``mcp-lab clients export --format mcp-client-capabilities`` writes the lab's history in
that shape, one entry per client the lab has run (keyed by its client file's
``client_info``), from its newest version observed (scenario ``single``, transport
``http`` where there are such rows, and the setup with the best level). The lab's own
fields (what it saw, the run's date, lab version and folders) go under
``experimental["mcp-subscribe-lab"]``: ``experimental`` is MCP's place for capabilities
outside the spec, and the package's own validator (``dist/validate.js``) accepts it.
``mcp-lab clients declared`` sets what the database declares beside what the lab saw.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mcp_lab import untrusted
from mcp_lab.runners.clients import history
from mcp_lab.runners.clients.definition import ANY_CLIENT, HTTP, NPM, PYPI, ClientDef
from mcp_lab.runners.clients.pins import CLIENTS
from mcp_lab.runners.history_cells import cell_text
from mcp_lab.runners.history_store import history_path
from mcp_lab.runners.install import (
    CLIENTS_CACHE,
    InstallError,
    cache_dir,
    checked,
    resolve_version,
)
from mcp_lab.runners.versions import version_key

PACKAGE = "mcp-client-capabilities"
PIN = "0.0.14"
FORMAT = "mcp-client-capabilities"
LAB_KEY = "mcp-subscribe-lab"  # the lab's fields, under each entry's "experimental"
_DATA = Path("dist") / "mcp_client_capabilities" / "mcp-clients.json"
_TYPES = Path("dist") / "types.d.ts"
_RECORD = "McpClientRecord"
_COMPARED = ("resources", "subscribe", "listChanged")
SINGLE = "single"
_LIST_CHANGED_SCENARIO = "list-changed"
_NOTE_CHARS = 400  # a note on stderr, at most (each one line, its controls escaped)


class DatabaseError(ValueError):
    """The database's package is not what the lab can read, or an export fails its types."""


@dataclass(frozen=True)
class Database:
    version: str
    clients: dict[str, dict[str, Any]]
    schema: dict[str, Any]  # one entry's JSON Schema, from the package's types
    root: Path  # the installed package


def install(version: str = PIN) -> Path:
    """The package at ``version`` (``latest``: npm's newest now), installed once into
    ``<clients cache>/mcp-client-capabilities-<version>``; InstallError if it cannot be."""
    version = resolve_version(PACKAGE, version)
    prefix = cache_dir(CLIENTS_CACHE) / f"{PACKAGE}-{version}"
    root = prefix / "node_modules" / PACKAGE
    if (prefix / ".mcp-lab-installed").exists():
        return root
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not on PATH (install Node.js and npm)")
    # Into a folder of this process's own, then renamed: two installs at once never mix.
    building = prefix.with_name(f"{prefix.name}.{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    argv = [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix"]
    try:
        checked([*argv, str(building), f"{PACKAGE}@{version}"], f"npm install {PACKAGE}@{version}")
        (building / ".mcp-lab-installed").write_text(f"{PACKAGE}@{version}\n")
        building.rename(prefix)
    except OSError as exc:
        if not (prefix / ".mcp-lab-installed").exists():  # not another's install, done first
            raise InstallError(f"{PACKAGE}@{version} could not be put in {prefix}: {exc}") from exc
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return root


def load(version: str = PIN) -> Database:
    root = install(version)
    try:
        meta = json.loads((root / "package.json").read_text())
        clients = json.loads((root / _DATA).read_text())
        schema = record_schema((root / _TYPES).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DatabaseError(f"{PACKAGE} in {root} cannot be read: {exc}") from exc
    if not isinstance(clients, dict):
        raise DatabaseError(f"{root / _DATA} is not an object keyed by clientInfo name")
    return Database(str(meta.get("version", version)), clients, schema, root)


# -- the package's types as a JSON Schema ---------------------------------------------

_TOKEN = re.compile(r"[A-Za-z_$][\w$]*|[?:;{}]|\S")
_SCALARS = {"string": "string", "boolean": "boolean", "number": "number"}


def record_schema(types: str) -> dict[str, Any]:
    """The JSON Schema of ``interface McpClientRecord`` in ``types`` (a ``.d.ts``): its
    members, optional or not, each ``string``, ``boolean``, ``number`` or an object of
    such members; objects with members are closed (as the package's validator has them),
    ``{}`` is any object. The top level also takes ``experimental``, as MCP's
    capabilities and the package's validator do. DatabaseError for any other form."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", types, flags=re.S)
    start = re.search(rf"\binterface\s+{_RECORD}\s*(?=\{{)", text)
    if start is None:
        raise DatabaseError(f"the types name no interface {_RECORD}")
    tokens = iter(_TOKEN.findall(text, start.end()))
    schema = _object(tokens)
    if "properties" not in schema:
        raise DatabaseError(f"the types' {_RECORD} has no members")
    schema["properties"]["experimental"] = {"type": "object"}
    return schema


def _object(tokens: Iterator[str], opened: bool = False) -> dict[str, Any]:
    if not opened:
        _expect(tokens, "{")
    properties: dict[str, Any] = {}
    required: list[str] = []
    while (name := next(tokens, "")) != "}":
        if not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
            raise DatabaseError(f"{_RECORD}: a member the lab does not read at {name!r}")
        optional = (token := next(tokens, "")) == "?"
        if optional:
            token = next(tokens, "")
        if token != ":":
            raise DatabaseError(f"{_RECORD}.{name}: expected ':' but found {token!r}")
        properties[name] = _type(tokens, name)
        if not optional:
            required.append(name)
    if not properties:
        return {"type": "object"}
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _type(tokens: Iterator[str], name: str) -> dict[str, Any]:
    token = next(tokens, "")
    if token == "{":
        found = _object(tokens, opened=True)
    elif token in _SCALARS:
        found = {"type": _SCALARS[token]}
    else:
        raise DatabaseError(f"{_RECORD}.{name}: a type the lab does not read at {token!r}")
    end = next(tokens, "")
    if end != ";":
        raise DatabaseError(f"{_RECORD}.{name}: a type the lab does not read ({token} {end} ...)")
    return found


def _expect(tokens: Iterator[str], want: str) -> None:
    if (found := next(tokens, "")) != want:
        raise DatabaseError(f"{_RECORD}: expected {want!r} but found {found!r}")


def validate(exported: dict[str, Any], db: Database) -> None:
    """DatabaseError naming the first entry of ``exported`` that fails the types."""
    import jsonschema  # type: ignore[import-untyped]  # (only here: every mcp-lab starts faster)

    checker = jsonschema.Draft202012Validator(db.schema)
    for name, entry in exported.items():
        error = jsonschema.exceptions.best_match(checker.iter_errors(entry))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(entry)"
            raise DatabaseError(f"{name}: {where}: {error.message}")


# -- what the lab observed --------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """One client the lab has run: its built-in client file (None: none), its chosen
    row (None: only runner failures), and whether it listed again after list_changed
    (None: the list-changed scenario did not show it)."""

    spec: ClientDef | None
    entry: history.ClientEntry | None
    list_changed: bool | None

    @property
    def client_info(self) -> str | None:
        info = self.spec.client_info if self.spec else ""
        return info if info and info != ANY_CLIENT else None

    def saw(self, box: str) -> bool:
        return self.entry is not None and self.entry.answers.get(box) == "yes"

    def flags(self) -> dict[str, bool | None] | None:
        """resources (listed, read or subscribed), subscribe, listChanged."""
        if self.entry is None:
            return None
        seen = any(self.saw(box) for box in ("listed", "read", "subscribed"))
        return {"resources": seen, "subscribe": self.saw("subscribed"),
                "listChanged": self.list_changed}  # fmt: skip


def observed(
    entries: list[history.ClientEntry], clients: dict[str, ClientDef] | None = None
) -> dict[str, Observed]:
    """Per client run, its row: the newest version's, in scenario single over http
    where it has such rows, the setup with the best level (then the newest).
    ``clients``: the client files by name (default: the built-in ones)."""
    files = CLIENTS if clients is None else clients
    found: dict[str, Observed] = {}
    for client in dict.fromkeys(e.client for e in entries):
        mine = [e for e in entries if e.client == client and not e.failed]
        pool = [e for e in mine if e.scenario == SINGLE] or mine
        pool = [e for e in pool if e.transport == HTTP] or pool
        chosen = None
        if pool:
            newest = max(version_key(e.version) for e in pool)
            pool = [e for e in pool if version_key(e.version) == newest]
            latest = {e.setup: e for e in sorted(pool, key=lambda e: e.recorded)}
            chosen = max(latest.values(), key=lambda e: (e.level or 0, e.recorded))
        relisted = _relisted(mine, chosen.version) if chosen else None
        found[client] = Observed(files.get(client), chosen, relisted)
    return found


def _relisted(entries: list[history.ClientEntry], version: str) -> bool | None:
    """The newest list-changed row's answer (of ``version`` if it has one)."""
    runs = [e for e in entries if e.scenario == _LIST_CHANGED_SCENARIO]
    runs.sort(key=lambda e: (e.version == version, version_key(e.version), e.recorded))
    for entry in reversed(runs):
        for check in entry.checks:
            if check.get("key") == "relisted":
                return check.get("answer") == "yes"
    return None


def _evidence(entry: history.ClientEntry) -> dict[str, Any]:
    """Where the row came from: run, date, lab version, its folders."""
    keys = ("client", "version", "scenario", "setup", "transport", "level", "recorded",
            "lab_version", "source", "runs")  # fmt: skip
    found = {key: getattr(entry, key) for key in keys}
    return {**found, "history": f"mcp-lab clients history --client {entry.client}"}


def _package_url(spec: ClientDef, version: str) -> str:
    """A package URL (purl) for a client the database lacks: its url is required."""
    kind = {NPM: "npm", PYPI: "pypi"}.get(spec.source, "generic")
    return f"pkg:{kind}/{quote(spec.package or spec.name, safe='/')}@{quote(version)}"


def _observed_boxes(seen: Observed) -> dict[str, bool | None]:
    boxes: dict[str, bool | None] = {
        box: seen.saw(box) for box in ("listed", "read", "subscribed", "notified", "re_read")
    }
    return {**boxes, "listChanged": seen.list_changed}


def export_entry(seen: Observed, db: Database, others: list[Observed]) -> dict[str, Any]:
    """``seen``'s entry; ``others``: the clients that send the same clientInfo name."""
    assert seen.spec and seen.entry and seen.client_info
    entry, declared = seen.entry, db.clients.get(seen.client_info)
    out: dict[str, Any] = {
        "title": declared["title"] if declared else seen.spec.title,
        "url": declared["url"] if declared else _package_url(seen.spec, entry.version),
        "protocolVersion": entry.protocol,
    }
    if (seen.flags() or {}).get("resources"):
        out["resources"] = {"subscribe": seen.saw("subscribed")}
        if seen.list_changed is not None:
            out["resources"]["listChanged"] = seen.list_changed
    lab = {**_evidence(entry), "observed": _observed_boxes(seen)}
    lab["in_database"] = f"{PACKAGE}@{db.version}" if declared else None
    if others:
        lab["same_client_info"] = [
            {**_evidence(o.entry), "observed": _observed_boxes(o)} for o in others if o.entry
        ]
    return {**out, "experimental": {LAB_KEY: lab}}


def export(found: dict[str, Observed], db: Database) -> tuple[dict[str, Any], list[str]]:
    """The database's shape from ``found``, validated against its types; and notes on
    the clients left out or sharing a clientInfo name. Of clients that send one name,
    the entry is the best level's; the others are listed under ``same_client_info``."""
    notes: list[str] = []
    named: dict[str, list[tuple[history.ClientEntry, Observed]]] = {}
    for client, seen in found.items():
        if seen.entry is None:
            notes.append(f"left out {client}: no verdict, only runner failures")
        elif seen.client_info is None:
            notes.append(f"left out {client}: no client file names its clientInfo")
        else:
            named.setdefault(seen.client_info, []).append((seen.entry, seen))
    out: dict[str, Any] = {}
    for info, sharing in named.items():
        sharing.sort(key=lambda pair: (pair[0].level or 0, pair[0].recorded))
        best, others = sharing[-1], [seen for _, seen in sharing[:-1]]
        out[info] = export_entry(best[1], db, others)
        if others:
            names = ", ".join(entry.client for entry, _ in sharing)
            notes.append(f"clientInfo {info!r} is sent by {names}: its entry is "
                         f"{best[0].client}'s (the best level)")  # fmt: skip
    validate(out, db)
    return out, notes


def declared(found: dict[str, Observed], db: Database) -> list[dict[str, Any]]:
    """Per client, what the database declares against what the lab observed."""
    rows: list[dict[str, Any]] = []
    for client, seen in found.items():
        info, entry, saw = seen.client_info, seen.entry, seen.flags()
        record = db.clients.get(info) if info else None
        said = _declared_flags(record) if record is not None else None
        differs = [k for k in _COMPARED if said and saw and saw[k] is not None
                   and said[k] != saw[k]]  # fmt: skip
        if info is None:
            verdict = "clientInfo unknown"
        elif saw is None:
            verdict = "not observed (runner failures only)"
        elif said is None:
            verdict = "not in the database"
        else:
            verdict = "differs" if differs else "match"
        rows.append({
            "client": client, "client_info": info, "version": entry and entry.version,
            "protocol": entry and entry.protocol, "declared": said, "observed": saw,
            "verdict": verdict, "differs": differs, "evidence": entry and _evidence(entry),
        })  # fmt: skip
    return rows


def _declared_flags(record: dict[str, Any]) -> dict[str, bool | None]:
    resources = record.get("resources")
    flags = resources if isinstance(resources, dict) else {}
    return {"resources": resources is not None, "subscribe": flags.get("subscribe") is True,
            "listChanged": flags.get("listChanged") is True}  # fmt: skip


def declared_table(rows: list[dict[str, Any]], db: Database) -> str:
    def yn(flags: dict[str, bool | None] | None, key: str) -> str:
        value = None if flags is None else flags[key]
        return "-" if value is None else ("yes" if value else "no")

    head = ["client", "clientInfo", "version", *_COMPARED, "verdict"]
    cells = [head]
    for r in rows:
        pairs = [f"{yn(r['declared'], k)}/{yn(r['observed'], k)}" for k in _COMPARED]
        verdict = r["verdict"] + (f": {', '.join(r['differs'])}" if r["differs"] else "")
        names = [cell_text(r[key] or "-") for key in ("client", "client_info", "version")]
        cells.append([*names, *pairs, verdict])
    widths = [max(len(c[i]) for c in cells) for i in range(len(head) - 1)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]])
        for line in cells
    ]
    subscribing = [n for n, e in db.clients.items() if _declared_flags(e)["subscribe"]]
    resources = [n for n, e in db.clients.items() if "resources" in e]
    says = f"{len(subscribing)} declare subscribe" if subscribing else "none declares subscribe"
    lines += [
        "",
        "each cell: declared/observed ('-': not observed; listChanged is observed by the "
        "list-changed scenario)",
        f"{PACKAGE} {db.version}: {len(db.clients)} clients, {len(resources)} declare "
        f"resources, {says}",
    ]
    return "\n".join(lines)


# -- the subcommands --------------------------------------------------------------------


def add_parsers(actions: argparse._SubParsersAction) -> None:
    """Add ``export`` and ``declared`` to ``mcp-lab clients``."""
    version_help = (
        f"the version of the npm package {PACKAGE} to read (default {PIN}, the "
        "pin; latest: npm's newest), installed once into the clients' cache"
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
        help=f"{FORMAT}: its JSON, keyed by clientInfo name (default)",
    )
    export_parser.add_argument(
        "--output", type=Path, default=None, metavar="FILE", help="write here (default: stdout)"
    )
    export_parser.add_argument("--database-version", default=PIN, metavar="V", help=version_help)
    export_parser.set_defaults(func=_cmd_export)

    table = actions.add_parser(
        "declared",
        help=f"per client the lab has run: what {PACKAGE} declares against what the lab "
        "observed (resources, subscribe, listChanged)",
    )
    table.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table: a line per client, declared/observed (default); json: each comparison",
    )
    table.add_argument("--database-version", default=PIN, metavar="V", help=version_help)
    table.set_defaults(func=_cmd_declared)


def _read(args: argparse.Namespace) -> tuple[Database, dict[str, Observed]] | None:
    """The database and the observed rows; None after saying why not (on stderr)."""
    where = history_path()
    found = observed(history.CLIENT_HISTORY.read(where))
    if not found:
        print(
            f"mcp-lab: no clients run kept yet in {where} (mcp-lab clients run keeps each "
            "row there)",
            file=sys.stderr,
        )
        return None
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
    return None


def _cmd_export(args: argparse.Namespace) -> int:
    read = _read(args)
    if read is None:
        return 1
    db, found = read
    try:
        out, notes = export(found, db)
    except DatabaseError as exc:
        print(f"mcp-lab: the export fails {PACKAGE}'s types: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(out, indent=2) + "\n"
    for note in notes:  # a note names clients, and a client chose its clientInfo name
        print(f"mcp-lab: {untrusted.shown(note, _NOTE_CHARS)}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(
            f"wrote {len(out)} client(s) to {args.output} ({PACKAGE} {db.version}'s shape, "
            "checked against its types)",
            file=sys.stderr,
        )
    return 0


def _cmd_declared(args: argparse.Namespace) -> int:
    read = _read(args)
    if read is None:
        return 1
    db, found = read
    rows = declared(found, db)
    if args.format == "json":
        info = {"package": PACKAGE, "version": db.version, "clients": len(db.clients)}
        print(json.dumps({"database": info, "clients": rows}, indent=2))
    else:
        print(declared_table(rows, db))
    return 0
