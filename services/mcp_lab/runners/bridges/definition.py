"""A bridge as data: one TOML file says how it installs, the command line that starts
it in each direction (by version where versions differ), which versions cannot run a
direction and why. The built-in bridges are such files (``defs/*.toml`` here); a user's
own is read with ``mcp-lab bridges run --bridge-file PATH`` (docs/bridges.md). Keys:

    name = "my-remote"             # what --bridge takes; letters, digits, - _ .
    title = "My remote"            # optional (default: the name)
    caveat = "text"                # optional: what every row of it says first
    [install]                      # exactly one of npm, pypi, program
    npm = "mcp-remote"             # an npm package, installed once per version
    pypi = "mcp-proxy"             # a PyPI package, in a virtualenv of its own
    program = "fastmcp_proxy.py"   # a program shipped with the lab, run by its Python,
    package = "fastmcp"            #   on this dependency of the lab (its version is used)
    version = "0.15.1"             # the pinned version (npm, pypi)
    binary = "mcp-remote"          # optional: the program it installs (default: the package)
    shares = "supergateway"        # optional: that bridge's install (one package, two rows)
    unavailable = "why"            # optional: it cannot be installed (its row says why)
    [directions."stdio->HTTP"]     # a table per direction: CLIENT->LAB, stdio HTTP or SSE
    argv = ["{program}", "{url}"]  # the command line that starts it
    path = "/mcp"                  # optional: the client's path on its port (SSE: /sse)
    how = "mcp-remote URL"         # optional: how a user starts it (for the docs)
    ready = "connected"            # optional: a line it prints once it serves the lab
    prefix = "lab__"               # optional: what it puts before the lab's resource URIs
    [[directions."stdio->HTTP".by_version]]  # optional; the first that holds wins
    versions = "<0.1.0"            # comparisons joined by commas: ">=5.0.0, <6.0.0"
    argv = ["{program}", "{url}"]  # that range's command line (path too, optional)
    [[unsupported]]                # optional; checked in order
    directions = ["stdio->HTTP"]   # optional (default: all of the bridge's)
    versions = "<0.1.0"
    reason = "{version} speaks SSE only"  # its rows say "not supported: " and this
    [[files]]                      # optional, also per direction: written before a start,
    path = "{folder}/hub.json"     # as JSON indented by 2
    json = { servers = { lab = { url = "{url}" } } }

Placeholders: ``{program}`` (the installed bridge, words), ``{folder}`` (the run's folder),
``{home}`` (the bridge's HOME), ``{version}``, ``{now_ms}`` (the time in ms); a lab over
HTTP or SSE: ``{url}``; a stdio lab: ``{command}`` (its command line, words),
``{command_program}`` and ``{command_args}`` (its first word; the others, words),
``{command_line}`` (one shell-quoted string); an HTTP or SSE client side: ``{port}``.
Words stand alone in an argv element or JSON value; a JSON value that is one placeholder
takes its type (``{now_ms}`` a number, words a list); ``{{`` ``}}`` are braces. No range
holds the empty version (a test's own bridge).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path
from string import Formatter
from typing import Any, NamedTuple

from mcp_lab.protocol import Transport
from mcp_lab.runners.definitions import NAME, NPM, PYPI, DefinitionError, read_toml

FASTMCP = "fastmcp"  # a program shipped with the lab (else NPM or PYPI)
SHIPPED = ("fastmcp_proxy.py",)  # the programs an [install] program may name
WORDS = frozenset({"program", "command", "command_args"})  # placeholders of many words
_ALWAYS = frozenset({"program", "folder", "home", "version", "now_ms"})
_TO_URL, _PORT = frozenset({"url"}), frozenset({"port"})
_TO_COMMAND = frozenset({"command", "command_program", "command_args", "command_line"})
BRIDGE_PLACEHOLDERS = _ALWAYS | _TO_URL | _TO_COMMAND | _PORT
_ENDS = "|".join(re.escape(t.label) for t in Transport)  # stdio, HTTP, SSE
_DIRECTION = re.compile(rf"^({_ENDS})->({_ENDS})$")
_BOUND = re.compile(r"^(<=|>=|<|>|=)\s*([0-9]+(?:\.[0-9]+)*(?:-[0-9A-Za-z.-]+)?)$")
# Where a client connects unless the file says: the lab's own paths.
PATHS = {Transport.STREAMABLE_HTTP: "/mcp", Transport.SSE: "/sse"}
_TOP, _SHARES = "the top level", ("shares", "unavailable")
_BRIDGE_KEYS = {
    _TOP: {"name", "title", "caveat", "install", "directions", "unsupported", "files"},
    "[install]": {"npm", "pypi", "program", "package", "version", "binary", "shares",
                  "unavailable"},
    "direction": {"argv", "path", "how", "ready", "prefix", "files", "by_version"},
    "by_version": {"versions", "argv", "path"},
    "unsupported": {"directions", "versions", "reason"},
    "files": {"path", "json"},
}  # fmt: skip
Range = tuple[tuple[str, str], ...]  # (comparison, version): all of them hold
Files = tuple[tuple[str, Any], ...]  # (path, JSON value), their placeholders unfilled


class Start(NamedTuple):
    """One command line (its placeholders unfilled), and the client's path on its port."""

    argv: tuple[str, ...]
    path: str | None


@dataclass(frozen=True)
class Way:
    """One direction of a bridge (``stdio->HTTP``): its command line, by version."""

    direction: str
    start: Start
    by_version: tuple[tuple[Range, Start], ...] = ()
    how: str | None = None
    ready: str | None = None
    prefix: str = ""
    files: Files = ()


@dataclass(frozen=True)
class BridgeDef:
    """One bridge, as its file says (see the module docstring)."""

    name: str
    title: str
    source: str  # NPM, PYPI or FASTMCP (a program shipped with the lab)
    package: str
    version: str
    binary: str
    ways: tuple[Way, ...]
    unsupported: tuple[tuple[frozenset[str], Range, str], ...] = ()
    caveat: str | None = None
    shares: str | None = None
    unavailable: str | None = None
    files: Files = ()  # written in every direction
    origin: str = "built in"  # the file it came from


def load_bridge(path: Path) -> BridgeDef:
    """The bridge of the TOML file ``path``; DefinitionError naming what is wrong."""
    return _File(str(path)).bridge(read_toml(path))


def _client_path(way: str) -> str | None:
    """The path a client of direction ``way`` connects to unless the file says."""
    client = way.split("->")[0]
    return next((path for end, path in PATHS.items() if end.label == client), None)


def known_here(way: str) -> frozenset[str]:
    """The placeholders with a value in direction ``way``."""
    client, lab = way.split("->")
    ports = _PORT if client != "stdio" else frozenset()
    return _ALWAYS | (_TO_COMMAND if lab == "stdio" else _TO_URL) | ports


@dataclass(frozen=True)
class _File:
    """One file being read: each check raises DefinitionError naming it and the key."""

    origin: str

    def fail(self, why: str) -> DefinitionError:
        return DefinitionError(f"{self.origin}: {why}")

    def table(self, value: object, kind: str, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a table")
        unknown = sorted(set(value) - _BRIDGE_KEYS[kind])
        if unknown:
            raise self.fail(f"unknown key {unknown[0]!r} in {where} "
                            f"(known: {', '.join(sorted(_BRIDGE_KEYS[kind]))})")  # fmt: skip
        return value

    def text(self, part: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
        value = part.get(key, default)
        if value is None:
            raise self.fail(f"missing key {key!r} in {where}")
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where} {key} must be a non-empty string")
        return value

    def optional(self, part: dict[str, Any], key: str, where: str) -> str | None:
        return self.text(part, key, where) if key in part else None

    def tables(self, part: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        value = part.get(key, [])
        if not isinstance(value, list):
            raise self.fail(f"{where} must be a list of tables ([[{key}]])")
        return [self.table(v, key, f"{where}[{n}]") for n, v in enumerate(value)]

    def versions(self, part: dict[str, Any], where: str) -> Range:
        raw = self.text(part, "versions", where)
        bounds = [_BOUND.match(b.strip()) for b in raw.split(",")]
        if not all(bounds):
            raise self.fail(f"{where} versions {raw!r} is not a version range (comparisons "
                            "joined by commas, each <, <=, >, >= or = and a version, such "
                            'as ">=5.0.0, <6.0.0")')  # fmt: skip
        return tuple((m[1], m[2]) for m in bounds if m)

    def check(self, template: str, where: str, known: frozenset[str], alone: str) -> None:
        """That ``template`` names only placeholders ``known``, each as it may stand."""
        try:
            fields = [f for _, f, _, _ in Formatter().parse(template) if f is not None]
        except ValueError as exc:  # a lone { or }
            raise self.fail(f"{where}: {exc} (write {{{{ and }}}} for a literal brace)") from None
        for field in fields:
            if field not in BRIDGE_PLACEHOLDERS:
                raise self.fail(f"{where}: unknown placeholder {{{field}}} "
                                f"(known: {', '.join(sorted(BRIDGE_PLACEHOLDERS))})")  # fmt: skip
            if field not in known:
                raise self.fail(f"{where}: placeholder {{{field}}} has no value here "
                                f"(known here: {', '.join(sorted(known))})")  # fmt: skip
            if field in WORDS and template != f"{{{field}}}":
                raise self.fail(f"{where}: {{{field}}} is a list of words: it stands {alone}")

    def start(self, part: dict[str, Any], where: str, way: str, default: Start | None) -> Start:
        argv = part.get("argv", None if default is None else list(default.argv))
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise self.fail(f"missing key 'argv' in {where}" if argv is None
                            else f"{where} argv must be a non-empty list of strings")  # fmt: skip
        if "{program}" not in argv:
            raise self.fail(f'{where} argv must start the bridge: an element "{{program}}"')
        for n, element in enumerate(argv):
            self.check(element, f"{where} argv[{n}]", known_here(way), "alone in an element")
        path = part.get("path", default.path if default else _client_path(way))
        if "path" in part and (way.startswith("stdio->") or not str(path).startswith("/")):
            raise self.fail(f"{where} path: a string starting with / (not for a stdio client)")
        return Start(tuple(argv), path)

    def files(self, part: dict[str, Any], where: str, ways: list[str]) -> Files:
        found = []
        for n, file in enumerate(self.tables(part, "files", f"{where}[[files]]")):
            at = f"{where}[[files]][{n}]"
            path, content = self.text(file, "path", at), file.get("json")
            if content is None:
                raise self.fail(f"missing key 'json' in {at}")
            for way in ways:
                self.check(path, f"{at} path", known_here(way) - WORDS, "-")
                for spot, value in self.strings(content, f"{at} json"):
                    self.check(value, spot, known_here(way), "alone as a value")
            found.append((path, content))
        return tuple(found)

    def strings(self, value: object, where: str) -> list[tuple[str, str]]:
        """The strings of a JSON value, each with where it is."""
        if isinstance(value, dict | list):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            return [s for k, v in items for s in self.strings(v, f"{where}[{k!r}]")]
        return [(where, value)] if isinstance(value, str) else []

    def install(self, install: dict[str, Any]) -> tuple[str, str, str, str]:
        """Source, package, version and binary."""
        sources = [s for s in ("npm", "pypi", "program") if s in install]
        if len(sources) != 1:
            raise self.fail("[install] needs exactly one of npm, pypi, program")
        source, package = sources[0], self.text(install, sources[0], "[install]")
        if source != "program":
            version = self.text(install, "version", "[install]")
            binary = self.text(install, "binary", "[install]", package.rpartition("/")[2])
            return {"npm": NPM, "pypi": PYPI}[source], package, version, binary
        if package not in SHIPPED:
            raise self.fail(f"[install] program {package!r} is not shipped with the lab "
                            f"(shipped: {', '.join(SHIPPED)})")  # fmt: skip
        if "version" in install or "binary" in install:
            raise self.fail("[install] a program has its package's version (no version, binary)")
        package = self.text(install, "package", "[install]")
        try:
            return FASTMCP, package, installed_version(package), "python"
        except PackageNotFoundError:
            raise self.fail(f"[install] package {package!r} is not installed here") from None

    def way(self, key: str, raw: object) -> Way:
        where = f'[directions."{key}"]'
        if not _DIRECTION.match(key):
            raise self.fail(f"{where}: {key!r} is not a direction (CLIENT->LAB, each stdio, "
                            "HTTP or SSE, such as stdio->HTTP)")  # fmt: skip
        part = self.table(raw, "direction", where)
        default = self.start(part, where, key, None)
        variants = []
        for n, item in enumerate(self.tables(part, "by_version", f"{where} by_version")):
            at = f"{where} by_version[{n}]"
            variants.append((self.versions(item, at), self.start(item, at, key, default)))
        how, ready, prefix = (self.optional(part, k, where) for k in ("how", "ready", "prefix"))
        return Way(key, default, tuple(variants), how, ready, prefix or "",
                   self.files(part, f"{where} ", [key]))  # fmt: skip

    def bridge(self, data: dict[str, Any]) -> BridgeDef:
        top = self.table(data, _TOP, _TOP)
        name = self.text(top, "name", _TOP)
        if not NAME.match(name):
            raise self.fail(f"name {name!r}: letters, digits, '-', '_' and '.' only (64 at most)")
        install = self.table(top.get("install"), "[install]", "[install]")
        source, package, version, binary = self.install(install)
        directions = top.get("directions")
        if not isinstance(directions, dict) or not directions:
            raise self.fail("missing key 'directions' (a [directions.\"CLIENT->LAB\"] table each)")
        ways = [self.way(key, raw) for key, raw in directions.items()]
        names = [w.direction for w in ways]
        unsupported = []
        for n, item in enumerate(self.tables(top, "unsupported", "[[unsupported]]")):
            where = f"[[unsupported]][{n}]"
            only = item.get("directions", names)
            if not isinstance(only, list) or not only or not set(only) <= set(names):
                raise self.fail(f"{where} directions must be a list of this bridge's "
                                f"directions ({', '.join(names)})")  # fmt: skip
            reason = self.text(item, "reason", where)
            self.check(reason, f"{where} reason", frozenset({"version"}), "-")
            unsupported.append((frozenset(only), self.versions(item, where), reason))
        title, caveat = self.text(top, "title", _TOP, name), self.optional(top, "caveat", _TOP)
        shares, unavailable = (self.optional(install, k, "[install]") for k in _SHARES)
        return BridgeDef(name, title, source, package, version, binary, tuple(ways),
                         tuple(unsupported), caveat, shares, unavailable,
                         self.files(top, "", names), self.origin)  # fmt: skip
