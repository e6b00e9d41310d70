"""The bridges the lab knows how to run, their pinned versions, and how each is started
in each direction it supports.

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
from importlib.metadata import version
from pathlib import Path

from mcp_lab.runners.versions import version_key

STDIO, HTTP, SSE = "stdio", "HTTP", "SSE"
NPM, PYPI, FASTMCP, LOCAL = "npm", "PyPI", "fastmcp", "local"
PATHS = {HTTP: "/mcp", SSE: "/sse"}


@dataclass(frozen=True)
class Direction:
    """What the client speaks to the bridge, and what the bridge speaks to the lab."""

    client: str  # STDIO, HTTP or SSE
    lab: str

    @property
    def name(self) -> str:
        return f"{self.client}->{self.lab}"


def direction(name: str) -> Direction:
    """``stdio->HTTP`` as a Direction; ValueError for anything else."""
    client, sep, lab = name.partition("->")
    if not sep or client not in (STDIO, HTTP, SSE) or lab not in (STDIO, HTTP, SSE):
        raise ValueError(f"{name!r} is no direction (CLIENT->LAB, each stdio, HTTP or SSE)")
    return Direction(client, lab)


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
class Invocation:
    """How a bridge is started in one run: its argv, and (an HTTP or SSE client side)
    the URL the client is pointed at."""

    argv: list[str]
    client_path: str | None = None  # /mcp, /sse, ... on the bridge's port
    # A line the bridge prints once it serves the lab (beyond listening on its port).
    ready: str | None = None
    # What the bridge puts before the lab's resource URIs (a gateway's namespace).
    prefix: str = ""


Launch = Callable[[Ends], Invocation]
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
    launch: Launch | None = None
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

    def why_not(self, version: str, way: Direction) -> str | None:
        """Why ``version`` cannot run ``way`` at all; None when it can."""
        return None if self.unsupported is None else self.unsupported(version, way)


def _url(ends: Ends) -> str:
    assert ends.lab_url is not None, f"{ends.direction.name}: no lab URL"
    return ends.lab_url


def _command(ends: Ends) -> list[str]:
    assert ends.lab_command is not None, f"{ends.direction.name}: no lab command"
    return ends.lab_command


def _port(ends: Ends) -> str:
    assert ends.port is not None, f"{ends.direction.name}: no port"
    return str(ends.port)


def before(version: str, release: str) -> bool:
    """Whether ``version`` comes before ``release`` (npm's order; an empty version, a
    test's own bridge, is none)."""
    return bool(version) and version_key(version) < version_key(release)


# mcp-remote: --transport (http-only, sse-only) from 0.1.0; 0.0.x speaks SSE only.
_MCP_REMOTE_TRANSPORT = "0.1.0"


def _mcp_remote(ends: Ends) -> Invocation:
    if before(ends.version, _MCP_REMOTE_TRANSPORT):
        return Invocation([*ends.program, _url(ends)])  # SSE, its only transport
    only = "http-only" if ends.direction.lab == HTTP else "sse-only"
    return Invocation([*ends.program, _url(ends), "--transport", only])


def _mcp_remote_unsupported(version: str, way: Direction) -> str | None:
    if way.lab == HTTP and before(version, _MCP_REMOTE_TRANSPORT):
        return f"mcp-remote {version} speaks SSE only (--transport http-only came in 0.1.0)"
    return None


# supergateway: --streamableHttp (stdio->HTTP) from 3.0; Streamable HTTP served
# (--outputTransport streamableHttp, --stateful) from 3.4.
_SG_HTTP_CLIENT, _SG_HTTP_SERVED = "3.0.0", "3.4.0"


def _supergateway(ends: Ends, *, stateful: bool = True) -> Invocation:
    d = ends.direction
    if d.client == STDIO:
        flag = "--streamableHttp" if d.lab == HTTP else "--sse"
        return Invocation([*ends.program, flag, _url(ends)])
    served = ["--stdio", shlex.join(_command(ends)), "--port", _port(ends)]
    if d.client == HTTP:
        served += ["--outputTransport", "streamableHttp"]
        served += ["--stateful"] if stateful else []
    return Invocation([*ends.program, *served], PATHS[d.client])


def _supergateway_stateless(ends: Ends) -> Invocation:
    return _supergateway(ends, stateful=False)


def _supergateway_unsupported(version: str, way: Direction) -> str | None:
    if way.lab == HTTP and before(version, _SG_HTTP_CLIENT):
        return f"supergateway {version} has no --streamableHttp (it came in 3.0)"
    if way.client == HTTP and before(version, _SG_HTTP_SERVED):
        return (
            f"supergateway {version} serves no Streamable HTTP (--outputTransport "
            "streamableHttp came in 3.4)"
        )
    return None


# npm mcp-proxy's command lines, by major version: 6.x takes the server after "--"
# (``-- mcp-lab server --transport stdio``); 5.x takes the command first and its
# arguments after "--" (``mcp-lab -- server --transport stdio``: with "--" first it
# finds no command and prints its usage); 3.2 and 3.3 have neither "--" nor --host,
# run the server through a shell with --shell, and serve Streamable HTTP on /stream;
# before 3.2 it cannot pass options to the server it runs.
_PROXY_NPM_SHELL, _PROXY_NPM_HOST, _PROXY_NPM_DASHES = "3.2.0", "5.0.0", "6.0.0"


def _mcp_proxy_npm(ends: Ends) -> Invocation:
    d, version = ends.direction, ends.version
    server = "stream" if d.client == HTTP else "sse"
    command = _command(ends)
    if before(version, _PROXY_NPM_HOST):
        argv = [*ends.program, "--port", _port(ends), "--server", server]
        path = "/stream" if d.client == HTTP else PATHS[d.client]
        return Invocation([*argv, "--shell", shlex.join(command)], path)
    argv = [*ends.program, "--port", _port(ends), "--host", "127.0.0.1", "--server", server]
    if before(version, _PROXY_NPM_DASHES):
        return Invocation([*argv, command[0], "--", *command[1:]], PATHS[d.client])
    return Invocation([*argv, "--", *command], PATHS[d.client])


def _mcp_proxy_npm_unsupported(version: str, way: Direction) -> str | None:
    if before(version, _PROXY_NPM_SHELL):
        return (
            f"mcp-proxy {version} cannot pass options to the server it runs (no '--', no "
            "--shell), so it cannot start mcp-lab server --transport stdio (3.2 can)"
        )
    return None


def _mcp_proxy_pypi(ends: Ends) -> Invocation:
    d = ends.direction
    if d.client == STDIO:
        transport = "streamablehttp" if d.lab == HTTP else "sse"
        return Invocation([*ends.program, "--transport", transport, _url(ends)])
    argv = [*ends.program, "--port", _port(ends), "--host", "127.0.0.1", "--pass-environment"]
    return Invocation([*argv, "--", *_command(ends)], PATHS[d.client])


def _fastmcp(ends: Ends) -> Invocation:
    d = ends.direction
    front = {STDIO: "stdio", HTTP: "http", SSE: "sse"}[d.client]
    argv = [*ends.program, "--front", front]
    if d.client != STDIO:
        argv += ["--port", _port(ends)]
    if d.lab == STDIO:
        return Invocation([*argv, "--", *_command(ends)], PATHS.get(d.client))
    return Invocation([*argv, "--url", _url(ends)], PATHS.get(d.client))


def _mcp_hub(ends: Ends) -> Invocation:
    # Its marketplace catalog, fresh (it fetches one from the internet otherwise at
    # start): one placeholder entry, since it takes an empty catalog for a stale one.
    catalog = ends.home / ".local" / "share" / "mcp-hub" / "cache" / "registry.json"
    catalog.parent.mkdir(parents=True, exist_ok=True)
    placeholder = {"id": "none", "name": "none", "description": "offline"}
    fresh = {"servers": [placeholder]}
    stamp = int(time.time() * 1000)
    catalog.write_text(json.dumps({"registry": fresh, "lastFetchedAt": stamp}))
    if ends.direction.lab == STDIO:
        command = _command(ends)
        server: dict[str, object] = {"command": command[0], "args": command[1:]}
    else:
        server = {"url": _url(ends)}
    config = ends.folder / "mcp-hub.json"
    config.write_text(json.dumps({"mcpServers": {"lab": server}}, indent=2) + "\n")
    argv = [*ends.program, "--port", _port(ends), "--config", str(config)]
    # It lists the lab's resources as <server>__<uri>.
    return Invocation(argv, "/mcp", ready="'lab' MCP server connected", prefix="lab__")


# What every row of supergateway without --stateful says first.
STATELESS = (
    "stateless (supergateway's default without --stateful): it starts the stdio server "
    "anew for every request and keeps no session, so no subscription outlives its "
    "request and no stream is left to carry notifications/resources/updated"
)


def _directions(*names: str) -> tuple[Direction, ...]:
    return tuple(direction(n) for n in names)


BRIDGES: dict[str, BridgeSpec] = {
    spec.name: spec
    for spec in (
        BridgeSpec(
            name="mcp-remote",
            title="mcp-remote (a stdio server for a remote HTTP or SSE server)",
            source=NPM,
            package="mcp-remote",
            version="0.15.1",
            binary="mcp-remote",
            directions=_directions("stdio->HTTP", "stdio->SSE"),
            launch=_mcp_remote,
            unsupported=_mcp_remote_unsupported,
            how={
                "stdio->HTTP": "mcp-remote http://127.0.0.1:8089/mcp --transport http-only",
                "stdio->SSE": "mcp-remote http://127.0.0.1:8089/sse --transport sse-only",
            },
        ),
        BridgeSpec(
            name="supergateway",
            title="supergateway (stdio <-> SSE / Streamable HTTP)",
            source=NPM,
            package="supergateway",
            version="4.0.0",
            binary="supergateway",
            directions=_directions("stdio->HTTP", "stdio->SSE", "HTTP->stdio", "SSE->stdio"),
            launch=_supergateway,
            unsupported=_supergateway_unsupported,
            how={
                "stdio->HTTP": "supergateway --streamableHttp http://127.0.0.1:8089/mcp",
                "stdio->SSE": "supergateway --sse http://127.0.0.1:8089/sse",
                "HTTP->stdio": "supergateway --stdio 'mcp-lab server --transport stdio' "
                "--outputTransport streamableHttp --stateful --port 8000",
                "SSE->stdio": "supergateway --stdio 'mcp-lab server --transport stdio' --port 8000",
            },
        ),
        BridgeSpec(
            name="supergateway-stateless",
            title="supergateway serving Streamable HTTP in its default, stateless mode",
            source=NPM,
            package="supergateway",
            version="4.0.0",
            binary="supergateway",
            directions=_directions("HTTP->stdio"),
            launch=_supergateway_stateless,
            unsupported=_supergateway_unsupported,
            how={
                "HTTP->stdio": "supergateway --stdio 'mcp-lab server --transport stdio' "
                "--outputTransport streamableHttp --port 8000",
            },
            caveat=STATELESS,
            install_name="supergateway",
        ),
        BridgeSpec(
            name="mcp-proxy",
            title="mcp-proxy from npm (a stdio server served over Streamable HTTP or SSE)",
            source=NPM,
            package="mcp-proxy",
            version="6.7.19",
            binary="mcp-proxy",
            directions=_directions("HTTP->stdio", "SSE->stdio"),
            launch=_mcp_proxy_npm,
            unsupported=_mcp_proxy_npm_unsupported,
            how={
                "HTTP->stdio": "mcp-proxy --port 8080 --host 127.0.0.1 --server stream -- "
                "mcp-lab server --transport stdio",
                "SSE->stdio": "mcp-proxy --port 8080 --host 127.0.0.1 --server sse -- "
                "mcp-lab server --transport stdio",
            },
        ),
        BridgeSpec(
            name="mcp-proxy-py",
            title="mcp-proxy from PyPI (stdio <-> SSE / Streamable HTTP)",
            source=PYPI,
            package="mcp-proxy",
            version="0.13.0",
            binary="mcp-proxy",
            directions=_directions("stdio->HTTP", "stdio->SSE", "HTTP->stdio", "SSE->stdio"),
            launch=_mcp_proxy_pypi,
            how={
                "stdio->HTTP": "mcp-proxy --transport streamablehttp http://127.0.0.1:8089/mcp",
                "stdio->SSE": "mcp-proxy http://127.0.0.1:8089/sse",
                "HTTP->stdio": "mcp-proxy --port 8080 --pass-environment -- "
                "mcp-lab server --transport stdio",
                "SSE->stdio": "mcp-proxy --port 8080 --pass-environment -- "
                "mcp-lab server --transport stdio (its /sse endpoint)",
            },
        ),
        BridgeSpec(
            name="fastmcp-proxy",
            title="FastMCP's own proxy (fastmcp.server.create_proxy)",
            source=FASTMCP,
            package="fastmcp",
            version=version("fastmcp"),  # the installed one (a dependency of the lab)
            binary="python",
            directions=_directions("stdio->HTTP", "HTTP->HTTP", "SSE->HTTP", "HTTP->stdio"),
            launch=_fastmcp,
            how={
                "stdio->HTTP": "create_proxy('http://127.0.0.1:8089/mcp').run(transport='stdio')",
                "HTTP->HTTP": "create_proxy('http://127.0.0.1:8089/mcp').run(transport='http')",
                "SSE->HTTP": "create_proxy('http://127.0.0.1:8089/mcp').run(transport='sse')",
                "HTTP->stdio": "create_proxy({'mcpServers': {'lab': {'command': 'mcp-lab', "
                "'args': ['server', '--transport', 'stdio']}}}).run(transport='http')",
            },
        ),
        BridgeSpec(
            name="mcp-hub",
            title="MCP Hub (a gateway: many servers behind one endpoint)",
            source=NPM,
            package="mcp-hub",
            version="4.2.1",
            binary="mcp-hub",
            directions=_directions("SSE->HTTP", "SSE->stdio"),
            launch=_mcp_hub,
            how={
                "SSE->HTTP": "mcp-hub --port 37373 --config hub.json, with "
                '{"mcpServers": {"lab": {"url": "http://127.0.0.1:8089/mcp"}}}',
                "SSE->stdio": "mcp-hub --port 37373 --config hub.json, with "
                '{"mcpServers": {"lab": {"command": "mcp-lab", "args": ["server", '
                '"--transport", "stdio"]}}}',
            },
        ),
    )
}


def fastmcp_program() -> list[str]:
    """How FastMCP's proxy is started: this Python,
    :mod:`mcp_lab.runners.bridges.fastmcp_proxy`."""
    return [sys.executable, "-m", "mcp_lab.runners.bridges.fastmcp_proxy"]


def installed_by_version(name: str) -> bool:
    """Whether ``--version NAME=X`` can pick the version of bridge ``name`` (npm and
    PyPI bridges)."""
    spec = BRIDGES[name]
    return spec.source in (NPM, PYPI) and not spec.not_installable


def known() -> str:
    return ", ".join(BRIDGES)
