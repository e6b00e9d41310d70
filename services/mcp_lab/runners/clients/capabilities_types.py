"""The types of ``mcp-client-capabilities`` (``interface McpClientRecord`` in its
``dist/types.d.ts``) read into a JSON Schema, and an export checked against it.

The schema is the types and nothing more: an object with members is closed, as
TypeScript has an object literal of that interface (``tsc`` says TS2353 of a key the
interface lacks) and as the package's validator has it. ``experimental`` is not a
member of ``McpClientRecord`` (0.0.14): the validator accepts it, the types do not, so
the lab's own fields never go into an entry (they go into a file beside the export:
:mod:`mcp_lab.runners.clients.capabilities_evidence`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

RECORD = "McpClientRecord"
_TOKEN = re.compile(r"[A-Za-z_$][\w$]*|[?:;{}]|\S")
_SCALARS = {"string": "string", "boolean": "boolean", "number": "number"}


class DatabaseError(ValueError):
    """The database's package is not what the lab can read, or an export fails its types."""


def record_schema(types: str) -> dict[str, Any]:
    """The JSON Schema of ``interface McpClientRecord`` in ``types`` (a ``.d.ts``): its
    members, optional or not, each ``string``, ``boolean``, ``number`` or an object of
    such members; objects with members are closed (as TypeScript and the package's
    validator have them), ``{}`` is any object. DatabaseError for any other form."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", types, flags=re.S)
    start = re.search(rf"\binterface\s+{RECORD}\s*(?=\{{)", text)
    if start is None:
        raise DatabaseError(f"the types name no interface {RECORD}")
    tokens = iter(_TOKEN.findall(text, start.end()))
    schema = _object(tokens)
    if "properties" not in schema:
        raise DatabaseError(f"the types' {RECORD} has no members")
    return schema


def _object(tokens: Iterator[str], opened: bool = False) -> dict[str, Any]:
    if not opened:
        _expect(tokens, "{")
    properties: dict[str, Any] = {}
    required: list[str] = []
    while (name := next(tokens, "")) != "}":
        if not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
            raise DatabaseError(f"{RECORD}: a member the lab does not read at {name!r}")
        optional = (token := next(tokens, "")) == "?"
        if optional:
            token = next(tokens, "")
        if token != ":":
            raise DatabaseError(f"{RECORD}.{name}: expected ':' but found {token!r}")
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
        raise DatabaseError(f"{RECORD}.{name}: a type the lab does not read at {token!r}")
    end = next(tokens, "")
    if end != ";":
        raise DatabaseError(f"{RECORD}.{name}: a type the lab does not read ({token} {end} ...)")
    return found


def _expect(tokens: Iterator[str], want: str) -> None:
    if (found := next(tokens, "")) != want:
        raise DatabaseError(f"{RECORD}: expected {want!r} but found {found!r}")


def validate(exported: dict[str, Any], schema: dict[str, Any]) -> None:
    """DatabaseError naming the first entry of ``exported`` that fails ``schema`` (the
    types'); the name is quoted as JSON (a client chose it)."""
    import jsonschema  # type: ignore[import-untyped]  # (only here: every mcp-lab starts faster)

    checker = jsonschema.Draft202012Validator(schema)
    for name, entry in exported.items():
        error = jsonschema.exceptions.best_match(checker.iter_errors(entry))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(entry)"
            raise DatabaseError(f"{name!r}: {where}: {error.message}")
