"""The steps of the probe's flow after the connect, at either protocol: find the
resource (resources/list, or the templates for a template's resource), the first read
(and, against the lab, its version, with a note when that is not 1), wait for each
notification of the scenario's timeline, list and read a resource the timeline adds,
unsubscribe, and watch that nothing more comes. :class:`ProbeSteps` holds them; the
flow that runs them in order is :class:`mcp_lab.runners.probe.Probe`'s.
"""

from __future__ import annotations

import re
from contextlib import AsyncExitStack

import anyio
import mcp_types
from mcp import Client

from mcp_lab import protocol
from mcp_lab.runners.probe_connection import CLIENT, LIST_CHANGED, MODERN, UPDATED, ProbeConnection
from mcp_lab.runners.probe_output import (
    NO_NOTIFICATION,
    NOT_FOUND,
    PROTOCOL_ERROR,
    ProbeFailed,
    waiting,
)
from mcp_lab.scenarios.scenario import Action

# How long past the timeline's last step the probe watches for a notification that
# should not come (after an unsubscribe).
_QUIET_MARGIN_SECONDS = 2.0
LAB_NAME = "mcp-subscribe-lab"  # the lab's serverInfo name


def content_text(result: mcp_types.ReadResourceResult) -> str:
    return "\n".join(getattr(c, "text", "") or "" for c in result.contents)


class ProbeSteps(ProbeConnection):
    """The flow's steps (see :class:`mcp_lab.runners.probe.Probe`)."""

    def _initial(self, client: Client, text: str) -> None:
        """The ``initial_content`` step; against the lab, its version too, and when that
        is not 1, why (a state left by an earlier run) and how to start over."""
        info = client.server_info
        version = _lab_version(text) if info is not None and info.name == LAB_NAME else None
        if version is None or version == 1:
            self.emit("initial_content", text=text, **({} if version is None else {"version": 1}))
            return
        note = _not_first_note(version, client.protocol_version == MODERN)
        self.emit("initial_content", text=text, version=version, note=note)
        self.say(note)

    def _plan(self) -> list[Action]:
        """What the lab will do after the subscribe, in order: the scenario's timeline
        (one update when the probed URI does not start it)."""
        if not self.scenario.starts_timeline(self.lab_uri):
            return [Action()]
        return sorted(self.scenario.timeline, key=lambda action: action.after)

    async def _find(self, client: Client) -> None:
        """List the resources (or, for a template's resource, the templates) and find
        the one to probe there."""
        templates = self.scenario.catalog.templates
        if self.lab_uri in self.scenario.catalog.uris() or not templates:
            listed = await self._call("list", NOT_FOUND, client.list_resources())
            uris = [str(r.uri) for r in listed.resources]
            if self.uri not in uris:
                raise ProbeFailed(NOT_FOUND, "resource", f"{self.uri} not in resources/list {uris}")
            self.emit("resource", uri=self.uri, found=True)
            return
        found = await self._call("list", NOT_FOUND, client.list_resource_templates())
        shapes = [str(t.uri_template) for t in found.resource_templates]
        match = next((t for t in templates if t.uri_template in shapes), None)
        if match is None or match.match(self.lab_uri) is None:
            message = f"{self.uri} fits no template of resources/templates/list {shapes}"
            raise ProbeFailed(NOT_FOUND, "resource", message)
        self.emit("resource", uri=self.uri, found=True, template=match.uri_template)

    async def _next(self, method: str, step: str) -> None:
        """Wait (at most --timeout) for the next notification ``method`` (about the
        probed URI, for an update)."""
        async with waiting(method, self.timeout, say=self.say):
            with anyio.move_on_after(self.timeout):
                async for got, uri in self._arrived:
                    if got == method and (method != UPDATED or uri == self.uri):
                        return
        raise ProbeFailed(NO_NOTIFICATION, step, f"no {method} within {self.timeout}s")

    async def _new_resource(self, client: Client, step: Action) -> None:
        """A resource is added: wait for list_changed, list again, find and read it."""
        await self._next(LIST_CHANGED, "list_changed")
        self.emit("list_changed")
        listed = await self._call("list", NOT_FOUND, client.list_resources())
        uris = [str(r.uri) for r in listed.resources]
        served = self.prefix + str(step.uri)
        if served not in uris:
            raise ProbeFailed(NOT_FOUND, "new_resource", f"{served} not in resources/list {uris}")
        added = await self._call("read", NOT_FOUND, client.read_resource(served))
        self.emit("new_resource", uri=served, text=content_text(added))

    async def _unsubscribe(
        self, client: Client, modern: bool, listening: AsyncExitStack | None
    ) -> None:
        """Unsubscribe (2026-07-28: close the listen stream, if ``listening`` still holds it)."""
        if modern:
            if listening is not None:
                await listening.aclose()
            if self._listen_ended.is_set():  # the server ended it (Scenario.listen_close)
                self.emit("unsubscribed", method="subscriptions/listen stream ended by the server")
            else:
                self.emit("unsubscribed", method="subscriptions/listen stream closed")
        else:
            await self._call("unsubscribe", PROTOCOL_ERROR, client.unsubscribe_resource(self.uri))
            self.emit("unsubscribed", method=protocol.UNSUBSCRIBE)

    async def _stays_quiet(self) -> None:
        """After an unsubscribe, the rest of the timeline must notify nothing: watched
        until its last step is due, plus a margin."""
        rest = max(a.after for a in self.scenario.timeline) + _QUIET_MARGIN_SECONDS
        with anyio.move_on_after(rest):
            async for got, uri in self._arrived:
                if got == UPDATED and uri == self.uri:
                    message = "a notification arrived after the unsubscribe"
                    raise ProbeFailed(PROTOCOL_ERROR, "quiet", message)
        self.emit("quiet_after_unsubscribe", watched_s=rest)


def _lab_version(text: str) -> int | None:
    """The version a lab resource's text states (its ``version: N`` line)."""
    found = re.search(r"^version: (\d+)$", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def _not_first_note(version: int, modern: bool) -> str:
    """Why the lab's first read gave ``version`` (not 1), and how to start over."""
    if modern:
        why = (
            f"at {MODERN} the lab keeps a client's state from one run to the next (one per "
            f"client name and version, here {CLIENT.name}/{CLIENT.version}, not per "
            "session), and an earlier probe's update left it there"
        )
    else:
        why = (
            "this session's state is not new: the lab keeps one state for every session "
            "(MCP_TEST_STATE_SCOPE=shared), and earlier updates moved it on"
        )
    return (
        f"the first read is version {version}, not 1: {why}. The flow works all the same "
        "(it waits for the next version); `mcp-lab reset` puts every state back to version 1."
    )
