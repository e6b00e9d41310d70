"""The bridges the lab knows how to run, their pinned versions, and how each is started
in each direction it supports: the bridge files of ``defs/`` (one per bridge, read by
:mod:`mcp_lab.runners.bridges.definition`), and a user's own given with
``--bridge-file``.

A direction is named client side first: ``stdio->HTTP`` is a bridge that a client
starts as a stdio server and that reaches the lab over Streamable HTTP (``mcp-remote``);
``HTTP->stdio`` serves Streamable HTTP and runs the lab's stdio server. "HTTP" is
Streamable HTTP (``/mcp``), "SSE" the legacy SSE transport (``/sse``).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_lab.protocol import Transport
from mcp_lab.runners.bridges.definition import (  # FASTMCP: for install.py's ``specs.FASTMCP``
    FASTMCP as FASTMCP,
)
from mcp_lab.runners.bridges.definition import (
    NPM,
    PYPI,
    BridgeDef,
    Range,
    Way,
    load_bridge,
)
from mcp_lab.runners.definitions import with_files
from mcp_lab.runners.versions import version_key

LOCAL = "local"  # a test's own bridge (never installed)
BRIDGE_DEFS = Path(__file__).with_name("defs")
# The built-in bridges' files (defs/NAME.toml), in the order the matrix shows them; a
# file not named here comes after them.
ORDER = ("mcp-remote", "supergateway", "supergateway-stateless", "mcp-proxy", "mcp-proxy-py",
         "fastmcp-proxy", "mcp-hub")  # fmt: skip


@dataclass(frozen=True)
class Direction:
    """What the client speaks to the bridge, and what the bridge speaks to the lab."""

    client: Transport
    lab: Transport

    @property
    def name(self) -> str:
        """``stdio->HTTP``: each end by its label (:attr:`Transport.label`)."""
        return f"{self.client.label}->{self.lab.label}"


def direction(name: str) -> Direction:
    """``stdio->HTTP`` as a Direction; ValueError for anything else."""
    client, sep, lab = name.partition("->")
    ends = [t for end in (client, lab) for t in Transport if t.label == end]
    if not sep or len(ends) != 2:
        raise ValueError(f"{name!r} is no direction (CLIENT->LAB, each stdio, HTTP or SSE)")
    return Direction(*ends)


@dataclass(frozen=True)
class Ends:
    """What a bridge is started with in one run: its program, where the lab is (the URL
    of the lab-side tap, or the command of the lab's stdio server behind its tap), the
    port it serves on (an HTTP or SSE client side), and a folder for its files."""

    program: list[str]  # the installed binary, or a Python and its module
    direction: Direction
    lab_url: str | None  # http://127.0.0.1:PORT/mcp or /sse (the lab-side tap)
    lab_command: list[str] | None  # the lab's stdio server (through the stdio tap)
    port: int | None  # the bridge's own port (HTTP or SSE client side)
    folder: Path  # the run's folder (kept)
    home: Path  # the bridge's HOME (its XDG directories inside)
    version: str = ""  # the version being run: a launch picks its command line by it


@dataclass(frozen=True)
class Launch:
    """How a bridge is started in one run: its argv, and (an HTTP or SSE client side)
    the URL the client is pointed at."""

    argv: list[str]
    client_path: str | None = None  # /mcp, /sse, ... on the bridge's port
    # A line the bridge prints once it serves the lab (beyond listening on its port).
    ready: str | None = None
    # What the bridge puts before the lab's resource URIs (a gateway's namespace).
    prefix: str = ""


Launcher = Callable[[Ends], Launch]
# Why version X of a bridge cannot run a direction at all (None: it can).
Unsupported = Callable[[str, Direction], str | None]


@dataclass(frozen=True)
class BridgeSpec:
    """One bridge: where it comes from, its pinned version, its directions, how it is
    started (``launch``), and, when it cannot be installed offline, why."""

    name: str
    title: str
    source: str  # NPM, PYPI, FASTMCP (the installed fastmcp), LOCAL (a test's own)
    package: str | None
    version: str
    binary: str
    directions: tuple[Direction, ...]
    launch: Launcher | None = None
    not_installable: str | None = None
    # How a user starts it, one line per direction (docs/bridges.md), {lab} the URL.
    how: dict[str, str] = field(default_factory=dict)
    # Why a version cannot run a direction (its row says "not supported", and why).
    unsupported: Unsupported | None = None
    # What every row of this bridge should say first (how it is set up changes what
    # a client sees).
    caveat: str | None = None
    # The install's name in the cache (two specs of one package share an install).
    install_name: str | None = None
    origin: str = "built in"  # the bridge file it came from

    def why_not(self, version: str, way: Direction) -> str | None:
        """Why ``version`` cannot run ``way`` at all; None when it can."""
        return None if self.unsupported is None else self.unsupported(version, way)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "=": lambda a, b: a == b,
}  # fmt: skip


def in_range(version: str, versions: Range) -> bool:
    """Whether ``version`` is in a bridge file's range (npm's order); an empty version,
    a test's own bridge, is in none."""
    key = version_key(version) if version else None
    return key is not None and all(_COMPARE[op](key, version_key(v)) for op, v in versions)


Values = dict[str, str | int | list[str]]


def _values(ends: Ends) -> Values:
    """What a bridge file's placeholders stand for in this run (see definition.py)."""
    values: Values = {"program": list(ends.program), "folder": str(ends.folder),
                      "home": str(ends.home), "version": ends.version,
                      "now_ms": int(time.time() * 1000)}  # fmt: skip
    if ends.lab_url is not None:
        values["url"] = ends.lab_url
    if ends.lab_command is not None:
        command = list(ends.lab_command)
        values.update(command=command, command_program=command[0], command_args=command[1:],
                      command_line=shlex.join(command))  # fmt: skip
    if ends.port is not None:
        values["port"] = str(ends.port)
    return values


def _fill_argv(template: str, values: Values) -> str:
    return template.format_map({k: v for k, v in values.items() if not isinstance(v, list)})


def _whole(text: str, values: Values) -> str | int | list[str] | None:
    """The value of ``text`` when it is one placeholder alone."""
    name = text[1:-1] if text.startswith("{") and text.endswith("}") else ""
    return values.get(name) if name.isidentifier() else None


def _argv(argv: tuple[str, ...], values: Values) -> list[str]:
    """A command line filled in: a placeholder of words (``{command}``) becomes them."""
    out: list[str] = []
    for element in argv:
        words = _whole(element, values)
        out += words if isinstance(words, list) else [_fill_argv(element, values)]
    return out


def _json(value: Any, values: Values) -> Any:
    """A file's JSON value filled in; a string that is one placeholder takes its type."""
    if isinstance(value, dict):
        return {k: _json(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v, values) for v in value]
    if isinstance(value, str):
        whole = _whole(value, values)
        return whole if whole is not None else _fill_argv(value, values)
    return value


def _launcher(bridge: BridgeDef) -> Launcher:
    ways: dict[str, Way] = {way.direction: way for way in bridge.ways}

    def launch(ends: Ends) -> Launch:
        way = ways[ends.direction.name]
        start = next((s for r, s in way.by_version if in_range(ends.version, r)), way.start)
        values = _values(ends)
        for path, content in [*bridge.files, *way.files]:
            written = Path(_fill_argv(path, values))
            written.parent.mkdir(parents=True, exist_ok=True)
            written.write_text(json.dumps(_json(content, values), indent=2) + "\n")
        return Launch(_argv(start.argv, values), start.path, way.ready, way.prefix)

    return launch


def _unsupported(bridge: BridgeDef) -> Unsupported:
    def why_not(version: str, way: Direction) -> str | None:
        for names, versions, reason in bridge.unsupported:
            if way.name in names and in_range(version, versions):
                return reason.format(version=version)
        return None

    return why_not


def from_def(bridge: BridgeDef) -> BridgeSpec:
    """The spec of a bridge file (its launch and its reasons made of the file's data)."""
    return BridgeSpec(
        name=bridge.name,
        title=bridge.title,
        source=bridge.source,
        package=bridge.package,
        version=bridge.version,
        binary=bridge.binary,
        directions=tuple(direction(way.direction) for way in bridge.ways),
        launch=_launcher(bridge),
        not_installable=bridge.unavailable,
        how={way.direction: way.how for way in bridge.ways if way.how is not None},
        unsupported=_unsupported(bridge) if bridge.unsupported else None,
        caveat=bridge.caveat,
        install_name=bridge.shares,
        origin=bridge.origin,
    )


def _builtin() -> dict[str, BridgeSpec]:
    rank = {name: n for n, name in enumerate(ORDER)}
    paths = sorted(BRIDGE_DEFS.glob("*.toml"), key=lambda p: (rank.get(p.stem, len(ORDER)), p.stem))
    specs = [from_def(load_bridge(path)) for path in paths]
    return {spec.name: spec for spec in specs}


BRIDGES: dict[str, BridgeSpec] = _builtin()

# What every row of supergateway without --stateful says first.
STATELESS: str = BRIDGES["supergateway-stateless"].caveat or ""


def bridges_with_files(files: list[Path]) -> dict[str, BridgeSpec]:
    """The built-in bridges and those of ``files`` (a file may not take a built-in's name);
    DefinitionError for a file that cannot be used."""
    return with_files(BRIDGES, files, lambda path: from_def(load_bridge(path)))


def fastmcp_program() -> list[str]:
    """How FastMCP's proxy is started: this Python,
    :mod:`mcp_lab.runners.bridges.fastmcp_proxy`."""
    return [sys.executable, "-m", "mcp_lab.runners.bridges.fastmcp_proxy"]


def installed_by_version(name: str) -> bool:
    """Whether ``--version NAME=X`` can pick the version of bridge ``name`` (npm and
    PyPI bridges)."""
    return by_version(BRIDGES[name])


def by_version(spec: BridgeSpec) -> bool:
    """Whether ``--version`` can pick the version of ``spec`` (npm and PyPI bridges)."""
    return spec.source in (NPM, PYPI) and not spec.not_installable


def known_bridges() -> str:
    return ", ".join(BRIDGES)
