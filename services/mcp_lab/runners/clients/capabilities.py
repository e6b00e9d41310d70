"""The community client database against what the lab observed.

``mcp-client-capabilities`` (npm) is a JSON file keyed by the ``clientInfo`` name a
client sends: its title, url, protocol version and the capabilities its authors
declare (``resources: {subscribe, listChanged}``, ...), declared by hand and never
observed. The lab reads it as data at run time: the npm package at :data:`PIN` (or
``--database-version``), installed once into the clients' cache, its data
(``dist/mcp_client_capabilities/mcp-clients.json``) and its own types
(``dist/types.d.ts``, read into a JSON Schema by
:mod:`mcp_lab.runners.clients.capabilities_types`) taken from there. The npm package,
not PyPI's: PyPI's needs Python 3.12 (the lab runs on 3.11), and its types name the keys
``list_changed`` and ``protocol_version`` where its JSON has ``listChanged`` and
``protocolVersion``.

``mcp-lab clients export --format mcp-client-capabilities`` writes the lab's history in
that shape, one entry per client the lab has run, keyed by the ``clientInfo`` name the
client sent (:mod:`mcp_lab.runners.clients.capabilities_evidence`: the row's note when
it sent another than its client file's ``client_info``, else that one; a user's client
file is given with ``--client-file``), from its newest version observed (scenario
``single``, transport ``http`` where there are such rows, and the setup with the best
level). Each entry is the package's ``McpClientRecord`` and nothing else (checked
against its types); the lab's own fields (what it saw, the expected name where the
client sent another, the run's date, lab version and run folders, none a local path)
go into a file beside it, keyed by the same names. ``mcp-lab clients declared`` sets
what the database declares for the name sent beside what the lab saw.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_lab.runners.clients import capabilities_evidence as shared
from mcp_lab.runners.clients import capabilities_types, history
from mcp_lab.runners.clients.capabilities_types import DatabaseError, record_schema
from mcp_lab.runners.clients.definition import ANY_CLIENT, HTTP, ClientDef, load_client
from mcp_lab.runners.clients.pins import CLIENTS
from mcp_lab.runners.definitions import with_files
from mcp_lab.runners.history_cells import cell_text
from mcp_lab.runners.install import (
    CLIENTS_CACHE,
    InstallError,
    cache_dir,
    checked,
    resolve_version,
)
from mcp_lab.runners.versions import version_key

__all__ = ["DatabaseError", "record_schema"]

PACKAGE = "mcp-client-capabilities"
PIN = "0.0.14"
FORMAT = "mcp-client-capabilities"
LAB_KEY = "mcp-subscribe-lab"  # the lab's file beside the export: <stem>.mcp-subscribe-lab.json
_DATA = Path("dist") / "mcp_client_capabilities" / "mcp-clients.json"
_TYPES = Path("dist") / "types.d.ts"
_COMPARED = ("resources", "subscribe", "listChanged")
SINGLE = "single"
_LIST_CHANGED_SCENARIO = "list-changed"


@dataclass(frozen=True)
class Database:
    version: str
    clients: dict[str, dict[str, Any]]
    schema: dict[str, Any]  # one entry's JSON Schema, from the package's types
    root: Path  # the installed package


def install(version: str = PIN, package: str = PACKAGE) -> Path:
    """The npm ``package`` (default the database) at ``version`` (``latest``: npm's
    newest now), installed once into ``<clients cache>/<package>-<version>``; its folder
    in there. InstallError if it cannot be."""
    version = resolve_version(package, version)
    prefix = cache_dir(CLIENTS_CACHE) / f"{package.replace('/', '+')}-{version}"
    root = prefix / "node_modules" / package
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
        checked([*argv, str(building), f"{package}@{version}"], f"npm install {package}@{version}")
        (building / ".mcp-lab-installed").write_text(f"{package}@{version}\n")
        building.rename(prefix)
    except OSError as exc:
        if not (prefix / ".mcp-lab-installed").exists():  # not another's install, done first
            raise InstallError(f"{package}@{version} could not be put in {prefix}: {exc}") from exc
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


def validate(exported: dict[str, Any], db: Database) -> None:
    """DatabaseError naming the first entry of ``exported`` that fails the types."""
    capabilities_types.validate(exported, db.schema)


# -- what the lab observed --------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """One client the lab has run: its client file (None: none known), its chosen row
    (None: only runner failures), and whether it listed again after list_changed
    (None: the list-changed scenario did not show it)."""

    spec: ClientDef | None
    entry: history.ClientEntry | None
    list_changed: bool | None

    @property
    def expected(self) -> str | None:
        """The clientInfo name its client file expects (None: no file, or any name)."""
        info = self.spec.client_info if self.spec else ""
        return info if info and info != ANY_CLIENT else None

    @property
    def sent(self) -> list[str]:
        """The clientInfo names its row's client sent: the row's note's, else the
        expected one if it connected (none: not known)."""
        if self.entry is None:
            return []
        if self.entry.client_info:  # kept with the row (a lab of history schema 4 on)
            name, slash, _ = self.entry.client_info.rpartition("/")  # NAME/VERSION
            return [name if slash else self.entry.client_info]
        told = shared.sent_names(self.entry, self.expected)
        if told is not None:
            return told
        return [self.expected] if self.expected and shared.connected(self.entry) else []

    @property
    def client_info(self) -> str | None:
        """The one clientInfo name it sent (None: none known, or several)."""
        sent = self.sent
        return sent[0] if len(sent) == 1 else None

    def saw(self, box: str) -> bool:
        return self.entry is not None and self.entry.answers.get(box) == "yes"

    def flags(self) -> dict[str, bool | None] | None:
        """resources (listed, read or subscribed), subscribe, listChanged."""
        if self.entry is None:
            return None
        seen = any(self.saw(box) for box in ("listed", "read", "subscribed"))
        return {"resources": seen, "subscribe": self.saw("subscribed"),
                "listChanged": self.list_changed}  # fmt: skip

    def left_out(self) -> str | None:
        """Why it has no entry in the export (None: it has one)."""
        if self.entry is None:
            return "no verdict, only runner failures"
        if len(self.sent) > 1:
            names = ", ".join(json.dumps(name) for name in self.sent)
            return f"its row says it sent several clientInfo names ({names})"
        if self.client_info is not None:
            return None
        if not shared.connected(self.entry):
            return "it never connected to the lab (no clientInfo seen)"
        if self.spec is None:
            return ("its row names no clientInfo and no client file of that name is "
                    "known (give the one it ran from: --client-file FILE)")  # fmt: skip
        return "its client file takes any clientInfo and its row names none"


def client_files(files: list[Path]) -> dict[str, ClientDef]:
    """The built-in client files and those of ``files`` (a file may not take a built-in's name);
    DefinitionError for a file that cannot be used."""
    return with_files(CLIENTS, files, load_client)


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


def _observed_boxes(seen: Observed) -> dict[str, bool | None]:
    boxes: dict[str, bool | None] = {
        box: seen.saw(box) for box in ("listed", "read", "subscribed", "notified", "re_read")
    }
    return {**boxes, "listChanged": seen.list_changed}


def _lab_fields(seen: Observed) -> dict[str, Any]:
    """What the lab saw of one client, for the file beside the export."""
    assert seen.entry is not None
    found = {**shared.evidence(seen.entry), "observed": _observed_boxes(seen)}
    if seen.expected is not None and seen.expected != seen.client_info:
        found["expected_client_info"] = seen.expected
    return found


def export_entry(seen: Observed, db: Database) -> dict[str, Any]:
    """``seen``'s entry: an ``McpClientRecord`` and nothing else."""
    assert seen.entry and seen.client_info
    entry, declared, spec = seen.entry, db.clients.get(seen.client_info), seen.spec
    out: dict[str, Any] = {
        "title": declared["title"] if declared else spec.title if spec else entry.client,
        "url": declared["url"] if declared else shared.package_url(spec, entry),
        "protocolVersion": entry.protocol,
    }
    if (seen.flags() or {}).get("resources"):
        out["resources"] = {"subscribe": seen.saw("subscribed")}
        if seen.list_changed is not None:
            out["resources"]["listChanged"] = seen.list_changed
    return out


def export(
    found: dict[str, Observed], db: Database
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The database's shape from ``found``, keyed by the clientInfo name each client
    sent and validated against its types; the lab's fields of each entry, keyed alike;
    notes on the clients left out, sending another name than expected, or sharing one.
    Of clients that send one name, the entry is the best level's; the others are listed
    under ``same_client_info`` in the lab's fields."""
    notes: list[str] = []
    named: dict[str, list[Observed]] = {}
    for client, seen in found.items():
        why = seen.left_out()
        if why is not None:
            notes.append(f"left out {client}: {why}")
            continue
        assert seen.client_info is not None
        if seen.expected is not None and seen.expected != seen.client_info:
            info, expected = seen.client_info, seen.expected
            notes.append(f"{client} sent clientInfo {info!r}, its client file expects "
                         f"{expected!r}: its entry is {info!r}")  # fmt: skip
        named.setdefault(seen.client_info, []).append(seen)
    out: dict[str, Any] = {}
    lab: dict[str, Any] = {}
    for info, sharing in named.items():
        sharing.sort(key=lambda o: (o.entry.level or 0, o.entry.recorded) if o.entry else (0, ""))
        best, others = sharing[-1], sharing[:-1]
        out[info] = export_entry(best, db)
        lab[info] = _lab_fields(best)
        lab[info]["in_database"] = f"{PACKAGE}@{db.version}" if info in db.clients else None
        if others:
            lab[info]["same_client_info"] = [_lab_fields(o) for o in others]
            names = ", ".join(o.entry.client for o in sharing if o.entry)
            client = best.entry.client if best.entry else "-"
            notes.append(f"clientInfo {info!r} is sent by {names}: its entry is "
                         f"{client}'s (the best level)")  # fmt: skip
    validate(out, db)
    return out, lab, notes


def declared(found: dict[str, Observed], db: Database) -> list[dict[str, Any]]:
    """Per client, what the database declares for the clientInfo name it sent against
    what the lab observed."""
    rows: list[dict[str, Any]] = []
    for client, seen in found.items():
        info, entry, saw = seen.client_info, seen.entry, seen.flags()
        record = db.clients.get(info) if info else None
        said = _declared_flags(record) if record is not None else None
        differs = [k for k in _COMPARED if said and saw and saw[k] is not None
                   and said[k] != saw[k]]  # fmt: skip
        if saw is None:
            verdict = "not observed (runner failures only)"
        elif entry is not None and not shared.connected(entry):
            verdict = "not observed (never connected)"
        elif info is None:
            verdict = "clientInfo unknown"
        elif said is None:
            verdict = "not in the database"
        else:
            verdict = "differs" if differs else "match"
        rows.append({
            "client": client, "client_info": info, "expected_client_info": seen.expected,
            "version": entry and entry.version, "protocol": entry and entry.protocol,
            "declared": said, "observed": saw, "verdict": verdict, "differs": differs,
            "evidence": entry and shared.evidence(entry, local=True),
        })  # fmt: skip
    return rows


def _declared_flags(record: dict[str, Any]) -> dict[str, bool | None]:
    resources = record.get("resources")
    flags = resources if isinstance(resources, dict) else {}
    return {"resources": resources is not None, "subscribe": flags.get("subscribe") is True,
            "listChanged": flags.get("listChanged") is True}  # fmt: skip


def _info_cell(row: dict[str, Any]) -> str:
    """The clientInfo name sent, and the expected one beside it when they differ."""
    info, expected = row["client_info"], row["expected_client_info"]
    if info is None:
        return cell_text(expected or "-")
    if expected is not None and expected != info:
        return f"{cell_text(info)} (expected {cell_text(expected)})"
    return cell_text(info)


def declared_table(rows: list[dict[str, Any]], db: Database) -> str:
    def yn(flags: dict[str, bool | None] | None, key: str) -> str:
        value = None if flags is None else flags[key]
        return "-" if value is None else ("yes" if value else "no")

    head = ["client", "clientInfo", "version", *_COMPARED, "verdict"]
    cells = [head]
    for r in rows:
        pairs = [f"{yn(r['declared'], k)}/{yn(r['observed'], k)}" for k in _COMPARED]
        verdict = r["verdict"] + (f": {', '.join(r['differs'])}" if r["differs"] else "")
        names = [cell_text(r["client"]), _info_cell(r), cell_text(r["version"] or "-")]
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
        "list-changed scenario); clientInfo: the name the client sent",
        f"{PACKAGE} {db.version}: {len(db.clients)} clients, {len(resources)} declare "
        f"resources, {says}",
    ]
    return "\n".join(lines)


def lab_file(output: Path) -> Path:
    """The file of the lab's fields beside an export: ``<stem>.mcp-subscribe-lab.json``."""
    return output.with_name(f"{output.stem}.{LAB_KEY}.json")
