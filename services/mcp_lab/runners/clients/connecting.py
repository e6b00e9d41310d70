"""A client file's ``[connect]`` table: what ``mcp-lab connect CLIENT`` prints to point
a person's own copy of the client at the running lab.

    [connect]
    file = "~/.my-agent/mcp.json (merge mcpServers)"  # where the snippet goes
    language = "json"              # the snippet's: json, toml or yaml
    writer = "mcp-servers-json"    # the snippet is this config writer's (the file's own
                                   # [config] writer): what the lab's runs write
    template = { servers = { "{server}" = { url = "{url}" } } }
                                   # or, for a client without a writer: json, a table
                                   # (the JSON data); toml or yaml, a string (its text)
    start = "my-agent"             # the command that starts the client with it
    notes = ["..."]                # optional: what else the user must do
    notes_from = "gemini_folder_trust"  # optional: notes made when connect runs (NOTES_FROM)

Exactly one of ``writer`` and ``template``. The strings of ``file``, ``template``,
``start`` and ``notes`` take ``{url}`` (the lab's MCP URL) and ``{server}`` (the
server's name in the config, ``lab``); ``{{`` and ``}}`` are literal braces. A client
with a ``[connect]`` table must speak http: the snippet names the lab's URL.

Notes that depend on where ``connect`` runs are code, named by ``notes_from``. Gemini
CLI connects to no MCP server, user-level ones included, in a folder it does not trust:
the lab is then listed as Disabled and never contacted (0.61.0, the version ``mcp-lab
clients`` pins: folder trust, ``security.folderTrust.enabled``, is on unless the
settings turn it off; ``~/.gemini/trustedFolders.json``, or
``GEMINI_CLI_TRUSTED_FOLDERS_PATH``, maps folders to ``TRUST_FOLDER``, ``TRUST_PARENT``
or ``DO_NOT_TRUST``, the longest match deciding; ``GEMINI_CLI_TRUST_WORKSPACE=true`` or
``--skip-trust`` trusts any folder for one run, and a headless ``gemini -p`` in an
untrusted folder exits instead). ``gemini_folder_trust`` says whether the folder
``connect`` runs in is trusted, and how to trust it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from string import Formatter
from typing import Any

from mcp_lab.runners.clients.configs import SERVER_NAME, SNIPPETS, Server

JSON, TOML, YAML = "json", "toml", "yaml"
LANGUAGES = (JSON, TOML, YAML)
KEYS = frozenset({"file", "language", "writer", "template", "start", "notes", "notes_from"})
CONNECT_PLACEHOLDERS = frozenset({"url", "server"})


@dataclass(frozen=True)
class Here:
    """Where ``connect`` runs: what notes made at that moment may depend on."""

    folder: Path
    home: Path
    env: Mapping[str, str]


@dataclass(frozen=True)
class Connection:
    """How one client is pointed at the lab (what ``connect`` prints)."""

    title: str
    file: str  # where the snippet goes
    config: Any  # the snippet: JSON data, or lines of TOML / YAML
    language: str  # json, toml or yaml
    start: str  # the command that starts the client with it
    notes: list[str] = field(default_factory=list)  # what else the user must do

    def snippet(self) -> str:
        if self.language == JSON:
            return json.dumps(self.config, indent=2)
        return "\n".join(self.config)


@dataclass(frozen=True)
class ConnectDef:
    """A client file's ``[connect]`` table (see the module docstring)."""

    file: str
    language: str
    start: str
    writer: str | None = None  # a name in configs.SNIPPETS
    template: Any = None  # JSON data with placeholders, or the text of a TOML / YAML one
    notes: tuple[str, ...] = ()
    notes_from: str | None = None  # a name in NOTES_FROM

    def connection(self, title: str, url: str, here: Here) -> Connection:
        """The snippet and the rest, for the lab at ``url``."""
        values = {"url": url, "server": SERVER_NAME}
        if self.writer is not None:
            config = SNIPPETS[self.writer](Server(url=url))
        elif self.language == JSON:
            config = _fill_snippet(self.template, values)
        else:
            config = str(self.template).format(**values).removesuffix("\n").split("\n")
        notes = [note.format(**values) for note in self.notes]
        if self.notes_from is not None:
            notes += NOTES_FROM[self.notes_from](here)
        return Connection(
            title,
            self.file.format(**values),
            config,
            self.language,
            self.start.format(**values),
            notes,
        )


def _fill_snippet(data: Any, values: dict[str, str]) -> Any:
    """``data`` with the placeholders of its strings (keys included) filled in."""
    if isinstance(data, str):
        return data.format(**values)
    if isinstance(data, dict):
        return {_fill_snippet(k, values): _fill_snippet(v, values) for k, v in data.items()}
    if isinstance(data, list):
        return [_fill_snippet(v, values) for v in data]
    return data


def _strings_of(data: Any, where: str) -> list[tuple[str, str]]:
    """Every string in ``data`` (keys included), each with where it is."""
    if isinstance(data, str):
        return [(where, data)]
    if isinstance(data, dict):
        found: list[tuple[str, str]] = []
        for key, value in data.items():
            found += [(where, str(key)), *_strings_of(value, f"{where}.{key}")]
        return found
    if isinstance(data, list):
        return [s for i, v in enumerate(data) for s in _strings_of(v, f"{where}[{i}]")]
    return []


def parse(
    table: dict[str, Any],
    fail: Callable[[str], Exception],
    config_writer: str,
    over_http: bool,
) -> ConnectDef:
    """The ``[connect]`` table of a client file whose ``[config] writer`` is
    ``config_writer``; ``fail(why)`` makes the error that names the file."""

    def text(key: str) -> str:
        value = table.get(key)
        if not isinstance(value, str) or not value:
            raise fail(f"[connect] {key} must be a non-empty string")
        return value

    if not over_http:
        raise fail("[connect]: the snippet names the lab's URL, so transports must include http")
    file, start, language = text("file"), text("start"), text("language")
    if language not in LANGUAGES:
        raise fail(f"[connect] language {language!r} is not one of {', '.join(LANGUAGES)}")
    writer, template = table.get("writer"), table.get("template")
    if (writer is None) == (template is None):
        raise fail("[connect] needs exactly one of writer (a config writer's snippet) "
                   "and template (the snippet itself)")  # fmt: skip
    if writer is not None:
        if writer not in SNIPPETS:
            raise fail(f"[connect] writer {writer!r} makes no snippet "
                       f"(those that do: {', '.join(SNIPPETS)})")  # fmt: skip
        if writer != config_writer:
            raise fail(f"[connect] writer {writer!r} is not this client's [config] writer "
                       f"{config_writer!r}: the snippet is what the lab's runs write "
                       "(give a template otherwise)")  # fmt: skip
        made = JSON if isinstance(SNIPPETS[writer](Server(url="http://x")), dict) else None
        if (made == JSON) != (language == JSON):
            raise fail(f"[connect] language {language!r} does not fit writer {writer!r} "
                       f"(its snippet is {'JSON data' if made else 'lines of text'})")  # fmt: skip
    elif language == JSON and not isinstance(template, dict):
        raise fail("[connect] template must be a table (the JSON data) for language json")
    elif language != JSON and (not isinstance(template, str) or not template.strip()):
        raise fail(f"[connect] template must be a non-empty string (the text) for {language}")
    notes = table.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) and n for n in notes):
        raise fail("[connect] notes must be a list of non-empty strings")
    notes_from = table.get("notes_from")
    if notes_from is not None and notes_from not in NOTES_FROM:
        raise fail(f"[connect] notes_from {notes_from!r} is not one of {', '.join(NOTES_FROM)}")
    for where, value in [
        ("[connect] file", file),
        ("[connect] start", start),
        *((f"[connect] notes[{i}]", n) for i, n in enumerate(notes)),
        *_strings_of(template, "[connect] template"),
    ]:
        try:
            fields = {name for _, name, _, _ in Formatter().parse(value) if name is not None}
        except ValueError as exc:  # a lone { or }
            raise fail(f"{where}: {exc} (write {{{{ and }}}} for a literal brace)") from None
        strange = sorted(fields - CONNECT_PLACEHOLDERS)
        if strange:
            raise fail(f"{where}: unknown placeholder {{{strange[0]}}} "
                       f"(known: {', '.join(sorted(CONNECT_PLACEHOLDERS))})")  # fmt: skip
    return ConnectDef(file, language, start, writer, template, tuple(notes), notes_from)


def _gemini_trust_rule(folder: Path, rules: dict[str, Any]) -> tuple[str, str] | None:
    """The rule of a trustedFolders.json that decides for ``folder`` (the longest
    matching path, as Gemini CLI takes it), as (path, level)."""
    found: tuple[str, str] | None = None
    for path, level in rules.items():
        covers = Path(path).parent if level == "TRUST_PARENT" else Path(path)
        covers = covers.expanduser().resolve()
        if (folder == covers or covers in folder.parents) and (
            found is None or len(path) > len(found[0])
        ):
            found = (path, str(level))
    return found


def gemini_trust(folder: Path, home: Path, env: Mapping[str, str]) -> list[str]:
    """What to do about Gemini CLI's folder trust, for gemini started in ``folder``."""
    folder = folder.resolve()
    lead = (
        "Gemini CLI connects to MCP servers only in a folder it trusts: elsewhere "
        "`gemini mcp list` shows the lab as Disabled and gemini never contacts it."
    )
    try:
        settings = json.loads((home / ".gemini" / "settings.json").read_text())
        trust = settings["security"]["folderTrust"]["enabled"]
    except (OSError, ValueError, KeyError, TypeError):
        trust = True  # its default
    if trust is False:
        return [
            "Folder trust is off in ~/.gemini/settings.json (security.folderTrust.enabled "
            "false): gemini contacts the lab in any folder."
        ]
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return [
            lead,
            "GEMINI_CLI_TRUST_WORKSPACE=true is set here: a gemini started from this "
            "shell trusts its folder.",
        ]
    named = env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
    trust_file = Path(named) if named else home / ".gemini" / "trustedFolders.json"
    shown = named or "~/.gemini/trustedFolders.json"
    try:
        rules = json.loads(trust_file.read_text())
        rule = _gemini_trust_rule(folder, rules if isinstance(rules, dict) else {})
    except FileNotFoundError:
        rule = None
    except (OSError, ValueError) as exc:
        return [lead, f"{shown} could not be read here ({exc}): is {folder} in it?"]
    if rule is not None and rule[1] in ("TRUST_FOLDER", "TRUST_PARENT"):
        return [lead, f"This folder ({folder}) is trusted: {shown} has {rule[0]!r}: {rule[1]}."]
    now = (
        f"This folder ({folder}) is marked DO_NOT_TRUST in {shown}"
        if rule is not None and rule[1] == "DO_NOT_TRUST"
        else f"This folder ({folder}) is not trusted yet"
    )
    entry = json.dumps({str(folder): "TRUST_FOLDER"}, separators=(",", ":"))
    return [
        lead,
        f"{now}: start gemini here and answer 'Trust folder' (or /permissions later), "
        f"or add it to {shown}: {entry}",
        "For one run only: gemini --skip-trust, or GEMINI_CLI_TRUST_WORKSPACE=true "
        "(a headless gemini -p in an untrusted folder exits instead).",
    ]


# The notes a client file can ask for by name (``[connect] notes_from``).
NOTES_FROM: dict[str, Callable[[Here], list[str]]] = {
    "gemini_folder_trust": lambda here: gemini_trust(here.folder, here.home, here.env),
}
