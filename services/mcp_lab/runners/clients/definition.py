"""A client as data: one TOML file says how it installs, how it is configured, which
model API it speaks, how a headless run is started, and which transports it supports.

The built-in clients are such files (``services/mcp_lab/runners/clients/defs/*.toml``); a
user's own is read with ``mcp-lab clients run --client-file PATH`` or ``mcp-lab check
--client-file PATH``; ``mcp-lab check --command CMD`` makes one from a command line
(:func:`from_command`). docs/own-client.md shows the format with examples; every key:

    name = "my-agent"              # what --client takes; letters, digits, - _ .
    title = "My Agent"             # optional (default: the name)
    kind = "cli"                   # cli (an agent with a model), program (no model:
                                   # it runs the whole flow itself), library (a program
                                   # written on a client library or agent framework, as
                                   # its docs show; a model API optional), inspector
                                   # (mcpdo), editor (an IDE the lab cannot drive: never
                                   # run nor listed by clients; only mcp-lab connect
                                   # knows it; needs [install] unavailable and [connect])
    client_info = "my-agent"       # the clientInfo name it sends in initialize
    transports = ["http", "stdio"] # how it can reach an MCP server (default: http)

    [install]                      # exactly one of npm, pypi, command
    npm = "@me/my-agent"           # an npm package, installed once per version
    pypi = "my-agent"              # a PyPI package, in a virtualenv of its own
    command = "my-agent"           # a program already on this machine (PATH or a path)
    version = "1.2.3"              # the pinned version (npm, pypi)
    binary = "my-agent"            # the program the package installs (default: name);
                                   # a path (with a /) is under node_modules instead
    node = "22"                    # optional: run it with Node 22 (installed beside it)
    python = "3.13"                # optional (pypi): the Python its virtualenv is made
                                   # with (python3.13 on PATH, or under ~/.pyenv/versions)
    postinstall = "pkg/install.js" # optional: a local script under node_modules, run once
    constraints = ["mcp<2.3"]      # optional (pypi): pip constraints on its dependencies
    packages = ["mcp==2.2.1"]      # optional: more packages installed beside it (npm:
                                   # name@version, pypi: a requirement); a change to
                                   # either installs it again (so does --reinstall)
    unavailable = "why"            # optional: it cannot be installed offline (a row says why)

    [model]
    api = "openai-chat"            # anthropic, openai-responses, openai-chat, gemini, none

    [config]
    writer = "mcp-servers-json"    # mcp-servers-json, env, or a CLI's own (claude-code,
                                   # codex, qwen-code, ...: configs.WRITERS names them all)
    path = "{home}/.my-agent/mcp.json"  # mcp-servers-json: where the file goes

    [run]
    argv = ["{binary}", "-p", "{prompt}"]          # one headless turn
    continue = ["{binary}", "-c", "-p", "{prompt}"]  # a later turn of the same session
    env = { MY_AGENT_BASE_URL = "{model_url}/v1" }
    interactive = "claude-code"    # optional: a built-in procedure for its interactive UI

    [connect]                      # optional: what mcp-lab connect prints for it (file,
                                   # language, writer or template, start, notes,
                                   # notes_from: mcp_lab.runners.clients.connecting)

Placeholders in ``argv``, ``continue``, ``env`` and ``path``: ``{binary}``,
``{prompt}``, ``{home}``, ``{workdir}``, ``{config}`` (the file the writer wrote),
``{model_url}``, ``{here}`` (the folder of the client file), ``{server}`` (the
server's name in the config, ``lab``), ``{url}``
(the lab's MCP URL, over http) and ``{server_command}`` (the command line that starts
the lab as a stdio server, over stdio); ``{{`` and ``}}`` are literal braces. Every
run also has ``MCP_LAB_URL`` or ``MCP_LAB_SERVER_COMMAND`` in its environment.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from string import Formatter
from typing import Any

from mcp_lab.protocol import Transport
from mcp_lab.runners.clients import connecting
from mcp_lab.runners.clients.configs import WRITERS
from mcp_lab.runners.definitions import NAME, NPM, PYPI, DefinitionError, read_toml

CLIENT_DEFS = Path(__file__).with_name("defs")
# The client libraries' programs, a client file each (kind "library").
LIBRARIES = Path(__file__).with_name("libraries")
# A client file's transports, and a row's: the transports' short names.
HTTP, STDIO = Transport.STREAMABLE_HTTP.short, Transport.STDIO.short
TRANSPORTS = (HTTP, STDIO)
CLI, PROGRAM, INSPECTOR, LIBRARY = "cli", "program", "inspector", "library"
KINDS = (CLI, LIBRARY, INSPECTOR, PROGRAM)  # the kinds the lab runs
# An editor the lab cannot drive offline: a client file for ``mcp-lab connect`` only,
# left out of builtin() (so of ``clients list`` and ``clients run``).
EDITOR = "editor"
FILE_KINDS = (*KINDS, EDITOR)
COMMAND = "command"  # a program on this machine (else NPM or PYPI)
NO_MODEL = "none"
# The clientInfo of a command whose client name is not known: any client that connects.
ANY_CLIENT = "*"
MODEL_APIS = ("anthropic", "openai-responses", "openai-chat", "gemini", NO_MODEL)
CONFIG_WRITERS = tuple(WRITERS)  # each a way to point a client at the lab (configs.py)
CLIENT_PLACEHOLDERS = frozenset(
    {
        "binary",
        "prompt",
        "home",
        "workdir",
        "config",
        "model_url",
        "server",
        "url",
        "server_command",
        "here",
    }
)
# The interactive UIs the runner can drive (``[run] interactive``), by name.
INTERACTIVE_UIS = ("claude-code",)
_PYTHON = re.compile(r"^3\.[0-9]{1,2}$")
_CLIENT_KEYS = {
    "": {"name", "title", "kind", "client_info", "transports", "install", "model", "config",
         "run", "connect"},
    "install": {"npm", "pypi", "command", "version", "binary", "node", "python",
                "postinstall", "unavailable", "constraints", "packages"},
    "model": {"api"},
    "config": {"writer", "path"},
    "run": {"argv", "continue", "env", "interactive"},
    "connect": set(connecting.KEYS),
}  # fmt: skip


@dataclass(frozen=True)
class ClientDef:
    """One client, as its file says (see the module docstring)."""

    name: str
    title: str
    kind: str
    client_info: str
    transports: tuple[str, ...]
    source: str  # NPM, PYPI or COMMAND
    package: str | None  # the npm or PyPI package; the command for COMMAND
    version: str
    binary: str
    model_api: str
    config_writer: str
    config_path: str | None = None
    argv: tuple[str, ...] = ()
    continue_argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    interactive: str | None = None
    node: str | None = None
    python: str | None = None  # the Python a pypi client's virtualenv is made with
    postinstall: str | None = None
    unavailable: str | None = None
    constraints: tuple[str, ...] = ()  # pip constraints of a pypi client's install
    packages: tuple[str, ...] = ()  # more packages its install puts beside it
    # A command of the caller's (``check --command --own-home``) runs under the caller's
    # HOME and XDG folders instead of the run's own.
    own_home: bool = False
    origin: str = "built in"  # the file it came from
    connect: connecting.ConnectDef | None = None  # what mcp-lab connect prints for it

    @property
    def here(self) -> str:
        """The folder of its file (``{here}``): a built-in's, or the working directory."""
        path = Path(self.origin)
        return str(path.resolve().parent) if path.suffix == ".toml" else str(Path.cwd())

    @property
    def uses_model(self) -> bool:
        return self.model_api != NO_MODEL

    @property
    def needs_node22(self) -> bool:
        return self.node == "22"

    @property
    def not_installable(self) -> str | None:
        return self.unavailable

    @property
    def local_postinstall(self) -> str | None:
        return self.postinstall

    @property
    def installed_by_version(self) -> bool:
        """Whether ``--version NAME=X`` can pick another version (a package has versions;
        a command on the machine is what it is)."""
        return self.source in (NPM, PYPI)


def load_client(path: Path) -> ClientDef:
    """The client of the TOML file ``path``; DefinitionError naming what is wrong."""
    return parse(read_toml(path), str(path))


def parse(data: dict[str, Any], origin: str) -> ClientDef:
    """A client from a parsed file (``origin`` names it in errors)."""

    def fail(why: str) -> DefinitionError:
        return DefinitionError(f"{origin}: {why}")

    for table, allowed in _CLIENT_KEYS.items():
        part = data if not table else data.get(table, {})
        if not isinstance(part, dict):
            raise fail(f"[{table}] must be a table")
        unknown = sorted(set(part) - allowed)
        if unknown:
            where = f"[{table}]" if table else "the top level"
            known = ", ".join(sorted(allowed))
            raise fail(f"unknown key {unknown[0]!r} in {where} (known: {known})")

    def text(table: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
        value = table.get(key, default)
        if not isinstance(value, str) or not value:
            raise fail(f"{where}{key} must be a non-empty string")
        return value

    name = text(data, "name", "")
    if not NAME.match(name):
        raise fail(f"name {name!r}: letters, digits, '-', '_' and '.' only (64 at most)")
    kind = text(data, "kind", "", CLI)
    if kind not in FILE_KINDS:
        raise fail(f"kind {kind!r} is not one of {', '.join(FILE_KINDS)}")
    transports = data.get("transports", [HTTP])
    if (
        not isinstance(transports, list)
        or not transports
        or any(t not in TRANSPORTS for t in transports)
    ):
        raise fail(f"transports must be a list of {', '.join(TRANSPORTS)}")
    install = data.get("install", {})
    if kind == EDITOR and "unavailable" not in install:
        raise fail("kind 'editor' needs [install] unavailable (why the lab does not run it)")
    sources = [s for s in (NPM, PYPI, COMMAND) if s in install]
    if len(sources) != 1 and "unavailable" not in install:
        raise fail("[install] needs exactly one of npm, pypi, command")
    source = sources[0] if sources else NPM
    package = install.get(source)
    if package is not None and (not isinstance(package, str) or not package):
        raise fail(f"[install] {source} must be a non-empty string")
    unversioned = "local" if source == COMMAND else "-" if package is None else None
    version = install.get("version", unversioned)
    if not isinstance(version, str) or not version:
        raise fail(f"[install] version is needed for a {source} package")
    default_binary = Path(shlex.split(package)[0]).name if source == COMMAND and package else name
    model = data.get("model", {})
    if kind == CLI and "api" not in model:
        raise fail(f"kind 'cli' needs [model] api: one of {', '.join(MODEL_APIS[:-1])}")
    api = text(model, "api", "[model] ", NO_MODEL)
    if api not in MODEL_APIS:
        raise fail(f"[model] api {api!r} is not one of {', '.join(MODEL_APIS)}")
    if kind != LIBRARY and (api == NO_MODEL) == (kind == CLI):
        raise fail(f"kind {kind!r} with [model] api {api!r}: a cli speaks a model API, "
                   "a program, inspector or editor none (a library either)")  # fmt: skip
    config = data.get("config", {})
    writer = text(config, "writer", "[config] ", "env")
    if writer not in CONFIG_WRITERS:
        raise fail(f"[config] writer {writer!r} is not one of {', '.join(CONFIG_WRITERS)}")
    path = config.get("path")
    if writer == "mcp-servers-json" and not isinstance(path, str):
        raise fail("[config] path is needed for the mcp-servers-json writer")
    run = data.get("run", {})
    argv = _strings(run.get("argv", []), "[run] argv", fail)
    continue_argv = _strings(run.get("continue", []), "[run] continue", fail)
    env = run.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise fail("[run] env must be a table of strings")
    if kind != INSPECTOR and not argv and "unavailable" not in install:
        raise fail("[run] argv is needed (how a headless run is started)")
    for where, template in [
        *(("[run] argv", a) for a in argv),
        *(("[run] continue", a) for a in continue_argv),
        *((f"[run] env {k}", v) for k, v in env.items()),
        *((("[config] path", path),) if isinstance(path, str) else ()),
    ]:
        try:
            fields = {name for _, name, _, _ in Formatter().parse(template) if name is not None}
        except ValueError as exc:  # a lone { or }: write {{ and }} for a brace
            raise fail(f"{where}: {exc} (write {{{{ and }}}} for a literal brace)") from None
        strange = sorted(fields - CLIENT_PLACEHOLDERS)
        if strange:
            raise fail(f"{where}: unknown placeholder {{{strange[0]}}} "
                       f"(known: {', '.join(sorted(CLIENT_PLACEHOLDERS))})")  # fmt: skip
    interactive = run.get("interactive")
    if interactive is not None and interactive not in INTERACTIVE_UIS:
        raise fail(f"[run] interactive {interactive!r} is not one of {', '.join(INTERACTIVE_UIS)}")
    node = install.get("node")
    if node is not None and node != "22":
        raise fail('[install] node may only be "22"')
    python = install.get("python")
    wrong_python = source != PYPI or not isinstance(python, str) or not _PYTHON.match(python)
    if python is not None and wrong_python:
        raise fail('[install] python is a version such as "3.13", for a pypi package')
    constraints = _strings(install.get("constraints", []), "[install] constraints", fail)
    if constraints and source != PYPI:
        raise fail("[install] constraints are pip's, for a pypi package (npm: packages)")
    packages = _strings(install.get("packages", []), "[install] packages", fail)
    if (constraints or packages) and source == COMMAND:
        raise fail("[install] constraints and packages are for an npm or pypi package")
    for where, item in [*(("constraints", c) for c in constraints),
                        *(("packages", p) for p in packages)]:  # fmt: skip
        if not item.strip() or item.lstrip().startswith("-") or "\n" in item:
            raise fail(f"[install] {where}: {item!r} is no requirement (no options, one line)")
    connect = None
    if "connect" in data:
        connect = connecting.parse(data["connect"], fail, writer, HTTP in transports)
    if kind == EDITOR and connect is None:
        raise fail("kind 'editor' needs a [connect] table (what mcp-lab connect prints)")
    return ClientDef(
        name=name,
        title=str(data.get("title", name)),
        kind=kind,
        client_info=text(data, "client_info", "", name),
        transports=tuple(transports),
        source=source,
        package=package,
        version=version,
        binary=str(install.get("binary", default_binary)),
        model_api=api,
        config_writer=writer,
        config_path=path,
        argv=tuple(argv),
        continue_argv=tuple(continue_argv),
        env={str(k): v for k, v in env.items()},
        interactive=interactive,
        node=node,
        python=python,
        postinstall=install.get("postinstall"),
        unavailable=install.get("unavailable"),
        constraints=tuple(constraints),
        packages=tuple(packages),
        origin=origin,
        connect=connect,
    )


def _strings(value: object, where: str, fail: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"{where} must be a list of strings")
    return list(value)


def every_file() -> dict[str, ClientDef]:
    """Every built-in client file's client, by name (defs/ then libraries/, each in
    the order of its file names), editors included."""
    found: dict[str, ClientDef] = {}
    for path in [*sorted(CLIENT_DEFS.glob("*.toml")), *sorted(LIBRARIES.glob("*.toml"))]:
        client = load_client(path)
        found[client.name] = client
    return found


def builtin() -> dict[str, ClientDef]:
    """The built-in clients the lab runs, by name: every file's but the editors'."""
    return {name: c for name, c in every_file().items() if c.kind != EDITOR}


def connectable() -> dict[str, ClientDef]:
    """The built-in clients ``mcp-lab connect`` knows: those with a ``[connect]`` table."""
    return {name: c for name, c in every_file().items() if c.connect is not None}


def from_command(command: str, transports: tuple[str, ...] = (HTTP, STDIO)) -> ClientDef:
    """An ad-hoc client for ``mcp-lab check --command``: a program already on the
    machine with no model, told the lab's URL (``{url}``, ``MCP_LAB_URL``) or the
    stdio server's command line (``{server_command}``, ``MCP_LAB_SERVER_COMMAND``)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise DefinitionError(f"--command: {exc}") from None
    if not argv:
        raise DefinitionError("--command is empty")
    return parse(
        {
            "name": "command",
            "title": argv[0],
            "kind": PROGRAM,
            "client_info": ANY_CLIENT,
            "transports": list(transports),
            "install": {"command": argv[0]},
            "run": {"argv": argv},
        },
        "--command",
    )
