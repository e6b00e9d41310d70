"""The formats a report is rendered in, each declared once, here.

A :class:`ReportFormat` is a name, the media type and file extension of its
rendering, a line saying what it is, and the function that renders a
:class:`~mcp_lab.evidence.build.Report`. Everything that offers formats reads them
from :data:`FORMATS`:

- ``mcp-lab report --format NAME`` (its choices and its help;
  services/mcp_lab/cli/state_commands.py), and the same read from a lab's server
  when its Redis is out of reach (services/mcp_lab/cli/served_report.py);
- the server: ``/api/report?format=NAME``, the download ``/api/report.EXT`` of each
  format, and the links to them in the dashboard's header
  (services/mcp_lab/server/exports.py, dashboard.py, guard.py);
- the report worker, which renders the server's files
  (services/mcp_lab/evidence/worker.py).

So a new format is one entry in :data:`FORMATS` and its renderer.

A format has one name. Its file extension (``md`` for ``markdown``) names its
download route and its file, never the format: :func:`get` refuses it as a name,
saying which name it is the extension of.

A renderer is called with ``public=False`` by ``mcp-lab report`` (read by whoever
runs the lab: the table and the JSON may show each session's id beside its label),
and with ``public=True`` by the server, whose answers anyone reaching its port may
read and whose files get attached to issues: then it must name every session by
its label alone, never by its ``Mcp-Session-Id`` (services/mcp_lab/evidence/labels.py).
It returns the whole text, its last line break included.

This module imports no renderer until one is called: ``mcp-lab``'s parser reads it
at every start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mcp_lab.evidence.build import Report
    from mcp_lab.evidence.labels import SessionLabels


class Render(Protocol):
    """Renders ``report``, sessions named by ``labels`` (by label alone when ``public``)."""

    def __call__(self, report: Report, labels: SessionLabels, *, public: bool) -> str: ...


@dataclass(frozen=True, slots=True)
class ReportFormat:
    """One format of the report."""

    name: str  # what --format and ?format= take
    media_type: str  # of the server's answer
    extension: str  # of its file, and of its download route
    description: str  # one line: --help, the title of its dashboard link
    render: Render

    @property
    def path(self) -> str:
        """The server's download of the report in this format."""
        return f"/api/report.{self.extension}"


class UnknownFormat(ValueError):
    """A format name that is none of :data:`FORMATS`; its message lists them."""


def _table(report: Report, labels: SessionLabels, *, public: bool) -> str:
    from mcp_lab.evidence.report import to_table

    if public:
        return to_table(relabelled(report, labels)) + "\n"
    return to_table(report, labels) + "\n"


def _markdown(report: Report, labels: SessionLabels, *, public: bool) -> str:
    from mcp_lab.evidence.report import to_markdown

    return to_markdown(report, labels)  # by label alone either way


def _json(report: Report, labels: SessionLabels, *, public: bool) -> str:
    import json

    from mcp_lab.evidence.encoded import dumps
    from mcp_lab.evidence.report import to_json

    if public:  # what /api/report sends (the feed's encoding of it is these bytes)
        return dumps(labels.public(to_json(report))).decode()
    return json.dumps(to_json(report, labels), indent=2) + "\n"


def _html(report: Report, labels: SessionLabels, *, public: bool) -> str:
    from mcp_lab.evidence.html_report import to_html

    return to_html(report, labels)  # by label alone either way


TABLE = ReportFormat(
    "table",
    "text/plain; charset=utf-8",
    "txt",
    "one row per client, then its sessions and notes",
    _table,
)
MARKDOWN = ReportFormat(
    "markdown",
    "text/markdown; charset=utf-8",
    "md",
    "compatibility notes, one block per client, with a mermaid sequence diagram",
    _markdown,
)
JSON = ReportFormat(
    "json",
    "application/json",
    "json",
    "everything, with each session's timeline",
    _json,
)
HTML = ReportFormat(
    "html",
    "text/html; charset=utf-8",
    "html",
    "one self-contained page with a picture of each session",
    _html,
)

# Every format, in the order they are offered; the first is mcp-lab report's default.
FORMATS: tuple[ReportFormat, ...] = (TABLE, MARKDOWN, JSON, HTML)
DEFAULT = FORMATS[0].name

_BY_NAME = {f.name: f for f in FORMATS}
# Names and extensions each name one format; "report" is the worker's own kind (the
# dashboard's encoding, services/mcp_lab/evidence/worker.py).
if len(_BY_NAME) != len(FORMATS) or len({f.extension for f in FORMATS}) != len(FORMATS):
    raise AssertionError("two report formats share a name or a file extension")
if "report" in _BY_NAME:
    raise AssertionError("'report' is the report worker's kind, not a format name")


def names() -> list[str]:
    """The formats' names, in order."""
    return list(_BY_NAME)


def get(name: str) -> ReportFormat:
    """The format named ``name``; :class:`UnknownFormat` (saying which names there
    are) for any other."""
    found = _BY_NAME.get(name)
    if found is not None:
        return found
    listed = ", ".join(names())
    for known in FORMATS:
        if name == known.extension:
            raise UnknownFormat(
                f"no report format {name!r}: that is the file extension of {known.name!r}; "
                f"the formats are {listed}"
            )
    raise UnknownFormat(f"no report format {name!r}; the formats are {listed}")


def help_text() -> str:
    """``--format``'s help: each format and what it is."""
    return "; ".join(
        f"{f.name}: {f.description}" + (" (default)" if f.name == DEFAULT else "") for f in FORMATS
    )


def relabelled(report: Report, labels: SessionLabels) -> Report:
    """``report`` with each session's id replaced by its label everywhere it holds one
    (scores and events), for a renderer that prints sessions as they are."""
    from dataclasses import replace

    from mcp_lab.evidence.levels import ClientScore, SessionScore
    from mcp_lab.evidence.scoring import LeftOut

    def session(score: SessionScore) -> SessionScore:
        label = labels(score.session)
        events = [replace(e, session=label) for e in score.events]
        return replace(score, session=label, events=events)

    left_out = report.left_out
    return replace(
        report,
        clients=[
            ClientScore(c.client, c.version, [session(s) for s in c.sessions])
            for c in report.clients
        ],
        left_out=LeftOut(
            [session(s) for s in left_out.began_earlier], dict(left_out.without_identity)
        ),
    )
