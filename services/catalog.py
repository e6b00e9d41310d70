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


class Catalog:
    """The resources one lab serves, by URI. Anything else is "Resource not found"."""

    def __init__(self, specs: Iterable[ResourceSpec]) -> None:
        self._specs: dict[str, ResourceSpec] = {}
        for spec in specs:
            if spec.uri in self._specs:
                raise ValueError(f"resource {spec.uri} is in the catalog twice")
            self._specs[spec.uri] = spec

    def __contains__(self, uri: object) -> bool:
        return uri in self._specs

    def __iter__(self) -> Iterator[ResourceSpec]:
        return iter(self._specs.values())

    def __getitem__(self, uri: str) -> ResourceSpec:
        return self._specs[uri]

    def uris(self) -> list[str]:
        return sorted(self._specs)


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

# What the lab serves.
LAB_CATALOG = Catalog([REVIEW_STATUS])

# The server's ``instructions`` (initialize, server/discover). Some CLIs put them in
# their model's context; the clients runner tells them apart from an update notice.
SERVER_INSTRUCTIONS = (
    f"Subscribe to {REVIEW_STATUS.uri}. It changes a few seconds later; when "
    "notifications/resources/updated arrives, read it again."
)
