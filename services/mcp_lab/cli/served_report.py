"""``mcp-lab report`` from the lab's server, when the lab's Redis is out of reach.

A ``docker compose`` lab publishes its server's port on the host and keeps its Redis
inside its network: ``report`` on the host then asks the server for the report its
dashboard shows (the current run, sessions by label): each format's download
(``/api/report.json``, ``.md``, ``.html``: :mod:`mcp_lab.evidence.formats`) as the server
renders it, but the terminal table, drawn here from ``/api/report`` (a server older than
its ``.txt`` download answers it too). ``--run``, ``--since`` and ``--scenario`` need
the lab's Redis.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from mcp_lab import untrusted
from mcp_lab.cli.where import Where
from mcp_lab.evidence import formats

_TIMEOUT_SECONDS = 30.0
_NOTE_CHARS = 300  # as much of a note as `mcp-lab report`'s own table shows


def _get(url: str, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def _shown(text: str) -> str:
    return untrusted.shown(text, untrusted.TABLE_CELL_CHARS)


def _clock(iso: str | None) -> str:
    return iso[11:23] if iso else "-"


def to_table(data: dict[str, Any]) -> str:
    """The terminal table of a report's JSON: one row per client (its best session's
    checkpoints), then its sessions and notes."""
    clients = data.get("clients", [])
    scenario = (data.get("scenario") or {}).get("name", "?")
    lines = [f"{data.get('window')}, {len(clients)} client(s), scenario {scenario}", ""]
    notes = list((data.get("left_out") or {}).get("notes", []))
    missing = data.get("missing_events")
    if missing:
        notes.insert(0, f"{missing} event(s) of this window could not be recorded")
    for note in notes:
        lines[-1:] = [f"note: {untrusted.shown(str(note), _NOTE_CHARS)}", ""]
    if not clients:
        lines.append("no client has connected in this window")
        return "\n".join(lines)
    checkpoints = data.get("checkpoints", [])
    rows = [["client", "level", *(c.get("title") or c["name"] for c in checkpoints)]]
    for client in clients:
        best = next(
            (s for s in client["sessions"] if s["session"] == client["best_session"]),
            client["sessions"][0] if client["sessions"] else {},
        )
        times = best.get("checkpoints", {})
        rows.append(
            [
                _shown(f"{client['client']}/{client['version']}"),
                f"{client['level']} {client['level_name']}",
                *(_clock(times.get(c["key"])) for c in checkpoints),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    for client in clients:
        lines += ["", _shown(f"{client['client']}/{client['version']}")]
        for session in client["sessions"]:
            lines.append(
                f"  session {_shown(str(session['session']))} "
                f"({_shown(str(session['protocol']))}, "
                f"{_shown(str(session['transport']))}): level {session['level']} "
                f"{session['level_name']}"
            )
        lines += [f"  - {untrusted.shown(str(n), _NOTE_CHARS)}" for n in client.get("notes", [])]
    return "\n".join(lines)


def run(lab: Where, args: argparse.Namespace) -> int:
    """Print the lab's report as its server gives it; returns the exit code."""
    asked = [f"--{name}" for name in ("run", "since", "scenario") if getattr(args, name)]
    if asked:
        print(
            f"mcp-lab: {' and '.join(asked)} need the lab's Redis, out of reach from here "
            f"(its server reports only the current run): {lab.out_of_reach('report')}",
            file=sys.stderr,
        )
        return 2
    table = args.format == formats.TABLE.name
    path = "/api/report" if table else formats.get(args.format).path
    url = f"{lab.server.base_url}{path}"
    print(
        f"mcp-lab: the report of the lab's server ({url}): the current run",
        file=sys.stderr,
        flush=True,
    )
    try:
        status, body = _get(url, lab.server.auth_token)
    except (OSError, http.client.HTTPException) as exc:
        print(f"mcp-lab: the lab's server does not answer at {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"mcp-lab: the lab's server answered HTTP {status} at {url}", file=sys.stderr)
        return 1
    if table:
        print(to_table(json.loads(body)))
    else:
        print(body, end="" if body.endswith("\n") else "\n")
    return 0
