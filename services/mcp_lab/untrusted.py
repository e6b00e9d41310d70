"""Values a client chooses, and how the lab keeps and shows them.

A client picks its ``clientInfo`` name and version, the URIs it asks for, the
method names it sends, the request path and its listen filters, in any length
and with any characters. Every place that records, logs, keys or echoes one
goes through here:

* **cut** (:func:`cut`) where it is taken in: each kind to its limit below, with
  a marker saying how long it was (``nnnn...(1000000 chars)``). Evidence records,
  state keys, job targets and error data hold the cut value, so one client's
  bytes cannot grow Redis, the log or an answer beyond these limits;
* **escaped** (:func:`escape`) where it is shown as text: in log lines and the
  table and markdown reports every control character becomes visible (``\\n``,
  ``\\x1b``, ``\\u2028``), and a backslash is doubled, so a value never starts a
  line and an escape never passes for a character the client sent;
* **HTML and markdown escaped** in the markdown report (:func:`for_markdown`);
* **percent-encoded** in keys made of several values (:func:`key_part`), so that
  ``a/b`` + ``c`` and ``a`` + ``b/c`` stay two keys.

JSON (``--format json``, ``/api/report``) carries the cut values as they are:
JSON escapes control characters itself, and the dashboard writes them as text.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

# Limits, in characters, of values a client chooses (docs/security.md lists them).
CLIENT_NAME_CHARS = 128
CLIENT_VERSION_CHARS = 64
URI_CHARS = 512
METHOD_CHARS = 128
# How much of a value a log line or a report shows.
PATH_CHARS = 200
LOG_PART_CHARS = 2_000  # any one part of an event line (detail, extra fields)
LOG_MESSAGE_CHARS = 8_000  # a whole log message, from any logger
TABLE_CELL_CHARS = 60
MARKDOWN_CHARS = 200

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, the
# direction marks, embeddings, overrides and isolates (which reorder text on a
# terminal), and the backslash that starts every escape.
_CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_ESCAPED = re.compile(f"[{_CONTROLS}\\\\]")
_CONTROL_ONLY = re.compile(f"[{_CONTROLS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
# ASCII punctuation by which markdown (CommonMark, GFM tables) would make a link,
# an image, code or a table cell of a value, and the backslash of the escapes;
# '<', '>' and '&' become entities (no HTML, no autolink). A value never starts a
# line, so the line-start markers ('#', '-', '1.') need nothing; emphasis ('_',
# '*') is left alone, so the lab's own words (MCP_TEST_...) stay readable.
_MARKDOWN = re.compile(r"([\\`\[\]!|])")


def cut(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit``
    followed by ``...(<length> chars)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} chars)"


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every control character (and the backslash) written as an escape."""
    return _ESCAPED.sub(_escaped, text)


def escape_controls(text: str) -> str:
    """``text`` with its control characters escaped and backslashes left alone: for
    a whole log message, whose values may have been escaped already."""
    return _CONTROL_ONLY.sub(_escaped, text)


def shown(text: str, limit: int) -> str:
    """A client's value for one line of text: cut to ``limit``, then escaped."""
    return escape(cut(text, limit))


def for_markdown(text: str, limit: int = MARKDOWN_CHARS) -> str:
    """A client's value inside a markdown line: cut, escaped, then its markdown
    punctuation backslash-escaped and its HTML special characters written as entities."""
    return html.escape(_MARKDOWN.sub(r"\\\1", shown(text, limit)), quote=False)


def key_part(text: str) -> str:
    """A value as one part of a key made of several (percent-encoded: no ``/``,
    ``:``, ``#`` or ``%`` of its own)."""
    return quote(text, safe="")
