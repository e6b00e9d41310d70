"""The resources the lab serves, as data.

A :class:`ResourceSpec` says everything about one resource: its URI, what
``resources/list`` shows, its text at version 1 and its text after an update.
The server registers, reads and validates resources from a :class:`Catalog`; the
updater takes the updated text from the same catalog, and scoring and the report
name the URI they score. Both processes import this module; adding a resource is
one more spec in a catalog, nothing else.

Texts may hold two placeholders: ``{status}`` (the status word of the settings,
``MCP_TEST_INITIAL_STATUS`` at version 1 and ``MCP_TEST_UPDATED_STATUS`` after an
update) and ``{version}``. The updater's script fills in ``{version}`` of the
updated text when it applies an update.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

STATUS_PLACEHOLDER = "{status}"
VERSION_PLACEHOLDER = "{version}"


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One resource of the lab."""

    uri: str
    name: str
    description: str
    mime_type: str
    initial_text: str
    updated_text: str

    def __post_init__(self) -> None:
        if not self.uri or "://" not in self.uri:
            raise ValueError(f"resource uri {self.uri!r} has no scheme")
        if VERSION_PLACEHOLDER not in self.updated_text:
            raise ValueError(f"updated text of {self.uri} has no {VERSION_PLACEHOLDER}")

    def initial(self, status: str) -> str:
        """The text at version 1."""
        return self.initial_text.replace(STATUS_PLACEHOLDER, status).replace(
            VERSION_PLACEHOLDER, "1"
        )

    def updated_template(self, status: str) -> str:
        """The text after an update, with ``{version}`` left for the updater's script."""
        return self.updated_text.replace(STATUS_PLACEHOLDER, status)


ID_PLACEHOLDER = "{id}"
# What an ``{id}`` of a template may be: short, and nothing a log or a key must escape.
_TEMPLATE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A resource template (``resources/templates/list``): one resource per ``{id}``.

    ``uri_template`` holds ``{id}`` once; the texts may hold it too (and ``{status}``,
    ``{version}``). A concrete URI matches when its ``{id}`` part is 1-64 letters,
    digits, ``_`` or ``-``."""

    uri_template: str
    name: str
    description: str
    mime_type: str
    initial_text: str
    updated_text: str

    def __post_init__(self) -> None:
        if self.uri_template.count(ID_PLACEHOLDER) != 1:
            raise ValueError(f"template {self.uri_template} needs {ID_PLACEHOLDER} once")

    def match(self, uri: str) -> str | None:
        """The ``{id}`` of ``uri`` when it is one of this template's resources."""
        head, _, tail = self.uri_template.partition(ID_PLACEHOLDER)
        if not (uri.startswith(head) and uri.endswith(tail)):
            return None
        found = uri[len(head) : len(uri) - len(tail)]
        return found if _TEMPLATE_ID.fullmatch(found) else None

    def concrete(self, uri: str) -> ResourceSpec:
        """The resource ``uri`` of this template (it must match)."""
        found = self.match(uri)
        if found is None:
            raise KeyError(uri)
        return ResourceSpec(
            uri=uri,
            name=f"{self.name}-{found}",
            description=self.description,
            mime_type=self.mime_type,
            initial_text=self.initial_text.replace(ID_PLACEHOLDER, found),
            updated_text=self.updated_text.replace(ID_PLACEHOLDER, found),
        )


class Catalog:
    """The resources one lab serves, by URI, and its resource templates. Anything
    else is "Resource not found"."""

    def __init__(
        self, specs: Iterable[ResourceSpec], templates: Iterable[TemplateSpec] = ()
    ) -> None:
        self._specs: dict[str, ResourceSpec] = {}
        for spec in specs:
            if spec.uri in self._specs:
                raise ValueError(f"resource {spec.uri} is in the catalog twice")
            self._specs[spec.uri] = spec
        self.templates: tuple[TemplateSpec, ...] = tuple(templates)

    def __contains__(self, uri: object) -> bool:
        """Whether ``uri`` is a resource served: listed, or one of a template's."""
        if uri in self._specs:
            return True
        return isinstance(uri, str) and self._template_of(uri) is not None

    def __iter__(self) -> Iterator[ResourceSpec]:
        """The listed resources (not those of templates)."""
        return iter(self._specs.values())

    def __getitem__(self, uri: str) -> ResourceSpec:
        spec = self._specs.get(uri)
        if spec is not None:
            return spec
        template = self._template_of(uri)
        if template is None:
            raise KeyError(uri)
        return template.concrete(uri)

    def _template_of(self, uri: str) -> TemplateSpec | None:
        return next((t for t in self.templates if t.match(uri) is not None), None)

    def uris(self) -> list[str]:
        """The listed resources' URIs."""
        return sorted(self._specs)

    def names(self, uri_or_template: str) -> bool:
        """Whether ``uri_or_template`` is a resource served or one of the templates."""
        return uri_or_template in self or any(
            t.uri_template == uri_or_template for t in self.templates
        )

    def same_resource(self, uri: str, watched: str) -> bool:
        """Whether ``uri`` is ``watched``, or one of the resources of template ``watched``."""
        if uri == watched:
            return True
        template = next((t for t in self.templates if t.uri_template == watched), None)
        return template is not None and template.match(uri) is not None


# The resources' text, as a client or a model may pass it on, raw or inside JSON (``\n``
# escaped): "status: <word>" then "version: <n>" (never "version: 2.1.332" of a CLI's
# banner).
RESOURCE_TEXT = re.compile(r"status: ([\w-]+)(?:\\+[rn]|\s)+version: (\d+)(?![\d.])")


def versions_in(text: str) -> list[int]:
    """The resource versions quoted in ``text``, in order."""
    return [int(m.group(2)) for m in RESOURCE_TEXT.finditer(text)]


def _status_text(message: str) -> str:
    return f"status: {STATUS_PLACEHOLDER}\nversion: {VERSION_PLACEHOLDER}\nmessage: {message}"


REVIEW_STATUS = ResourceSpec(
    uri="test://review/status",
    name="review-status",
    description=(
        "Simulated review status. It changes a few seconds after you subscribe to it; "
        "re-read it when notifications/resources/updated arrives."
    ),
    mime_type="text/plain",
    initial_text=_status_text("Waiting for simulated review result."),
    updated_text=_status_text("Simulated review result is now available."),
)

# What the lab serves (the default scenario's catalog).
LAB_CATALOG = Catalog([REVIEW_STATUS])

# The resource the list-changed scenario adds after the subscribe.
REVIEW_NOTES = ResourceSpec(
    uri="test://review/notes",
    name="review-notes",
    description="Notes of the simulated review; listed once the review has notes.",
    mime_type="text/plain",
    initial_text=(
        f"notes: the reviewer left 2 comments\nstatus: {STATUS_PLACEHOLDER}\n"
        f"version: {VERSION_PLACEHOLDER}"
    ),
    updated_text=(
        f"notes: the reviewer left 2 comments\nstatus: {STATUS_PLACEHOLDER}\n"
        f"version: {VERSION_PLACEHOLDER}"
    ),
)

# The template scenario's resources: one review per id (test://review/42, ...).
REVIEW_ITEM = TemplateSpec(
    uri_template="test://review/{id}",
    name="review",
    description=(
        "A simulated review, by id. It changes a few seconds after you subscribe to it; "
        "re-read it when notifications/resources/updated arrives."
    ),
    mime_type="text/plain",
    initial_text=_status_text("Waiting for simulated review {id}."),
    updated_text=_status_text("Simulated review {id} is now available."),
)

# The server's ``instructions`` (initialize, server/discover). Some CLIs put them in
# their model's context; the clients runner tells them apart from an update notice.
SERVER_INSTRUCTIONS = (
    f"Subscribe to {REVIEW_STATUS.uri}. It changes a few seconds later; when "
    "notifications/resources/updated arrives, read it again."
)
