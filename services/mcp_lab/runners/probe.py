"""``mcp-lab probe``: the ideal subscription flow against any MCP server, step by step.

connect (initialize, or server/discover at 2026-07-28) -> list -> read ->
subscribe (or subscriptions/listen) -> wait for notifications/resources/updated
-> read again -> unsubscribe (or close the listen stream). Over Streamable HTTP,
or over the legacy SSE transport with ``--transport sse``. One JSON object per
line on stdout per step (``STEPS``), and an exit code that names the first failure:

    0  the whole flow worked
    3  server unreachable, or the connection/handshake failed (the message says
       why when the HTTP answer tells: a token wanted, no MCP endpoint at that
       path, a legacy SSE endpoint)
    4  resource not found (not listed, or the read failed)
    5  subscribe refused (no resources.subscribe capability, or an error)
    6  no notification within --timeout
    7  another protocol error

As a library (:class:`Probe`), the same flow also runs over stdio (a server command,
``stdio=``), hands its steps to ``on_step`` instead of stdout and its progress to
``say`` instead of stderr, and with ``insist`` subscribes even when the server does
not advertise ``resources.subscribe`` (the bridges runner asks whether a subscribe
gets through a bridge that rewrote the capabilities).

The flow is :class:`Probe` here, and :func:`main` the command; what it says is in
:mod:`~mcp_lab.runners.probe_output` (the exit codes, ``STEPS``), the transport and
the handshake in :mod:`~mcp_lab.runners.probe_connection`, its steps in
:mod:`~mcp_lab.runners.probe_steps`, the 2026-07-28 listen in
:mod:`~mcp_lab.runners.probe_listen`.
"""

from __future__ import annotations

import sys
import time
from contextlib import AsyncExitStack

import anyio
from mcp import Client

from mcp_lab import protocol
from mcp_lab.runners.probe_connection import MODERN, UPDATED
from mcp_lab.runners.probe_listen import ProbeListen
from mcp_lab.runners.probe_output import (
    NO_NOTIFICATION,
    NOT_FOUND,
    OK,
    PROTOCOL_ERROR,
    SUBSCRIBE_REFUSED,
    ProbeFailed,
    failure_in,
)
from mcp_lab.runners.probe_steps import content_text
from mcp_lab.scenarios import registry
from mcp_lab.scenarios.scenario import ADD


class Probe(ProbeListen):
    """One run of the flow; ``run`` returns the exit code. ``transport`` "stdio" runs
    the server command ``stdio`` (its stderr to ``errlog``) instead of reaching ``url``;
    ``on_step`` and ``say`` take the step lines and the progress lines (stdout and
    stderr by default); ``insist``: subscribe even without ``resources.subscribe``;
    ``prefix``: the server serves ``uri`` (and the scenario's other resources) as
    ``prefix + uri`` (a gateway that namespaces the resources of its servers);
    ``keep_going``: a notification that does not come ends the wait, not the flow (it
    unsubscribes, then fails with exit code 6 all the same)."""

    async def run(self) -> int:
        started = time.monotonic()
        try:
            await self._connected_flow()
        except BaseException as exc:  # anyio may wrap the failure in an exception group
            failure = failure_in(exc)
            if failure is None:
                raise
            self.emit(
                "summary",
                ok=False,
                exit_code=failure.code,
                failed_step=failure.step,
                message=failure.message,
                seconds=round(time.monotonic() - started, 3),
            )
            return failure.code
        self.emit("summary", ok=True, exit_code=OK, seconds=round(time.monotonic() - started, 3))
        return OK

    async def _flow(self, client: Client) -> None:
        if self.protocol == "modern" and client.protocol_version != MODERN:
            raise ProbeFailed(
                PROTOCOL_ERROR,
                "connect",
                f"the server negotiated {client.protocol_version}, not {MODERN}",
            )
        caps = client.server_capabilities
        resources = caps.resources if caps is not None else None
        info = client.server_info
        self.emit(
            "capabilities",
            protocol=client.protocol_version,
            transport=self.transport.value,
            server=info.model_dump(exclude_none=True) if info else None,
            resources=resources.model_dump(exclude_none=True) if resources else None,
        )
        await self._find(client)
        first = await self._call("read", NOT_FOUND, client.read_resource(self.uri))
        self._initial(client, content_text(first))
        if (resources is None or not resources.subscribe) and not self.insist:
            raise ProbeFailed(
                SUBSCRIBE_REFUSED, "subscribe", "the server does not advertise resources.subscribe"
            )
        modern = client.protocol_version == MODERN
        subscribed = True
        async with AsyncExitStack() as listening:
            waited = time.monotonic()
            if modern:
                await self._listen(client, listening)
            else:
                await self._call(
                    "subscribe", SUBSCRIBE_REFUSED, client.subscribe_resource(self.uri)
                )
                self.emit("subscribed", method=protocol.SUBSCRIBE)
            updates = 0
            missed: ProbeFailed | None = None
            for step in self._plan():
                try:
                    if step.kind == ADD:
                        await self._new_resource(client, step)
                        continue
                    await self._next(UPDATED, "notification")
                except ProbeFailed as exc:
                    if not self.keep_going or exc.code != NO_NOTIFICATION:
                        raise
                    missed = exc  # unsubscribe all the same, then fail with it
                    break
                updates += 1
                after = round(time.monotonic() - waited, 3)
                self.emit("notification_received", uri=self.uri, n=updates, after_s=after)
                reader = self._reconnected or client  # a new connection after a drop
                final = await self._call("read", NOT_FOUND, reader.read_resource(self.uri))
                changed = content_text(final) != content_text(first)
                self.emit("final_content", n=updates, text=content_text(final), changed=changed)
                if updates == self.scenario.play.unsubscribe_after:
                    await self._unsubscribe(client, modern, listening)
                    subscribed = False
                    await self._stays_quiet()
                    break
            close = self.scenario.listen_close
            if modern and close is not None and subscribed and missed is None:
                await self._until_closed(close)
        if subscribed:  # leaving the stack above closed a listen stream
            await self._unsubscribe(client, modern, None)
        if missed is not None:
            raise missed


def main(
    url: str,
    uri: str | None,
    timeout: float,
    protocol: str,
    token: str | None,
    transport: str = "http",
    scenario: str | None = None,
) -> int:
    """Run the probe; returns the exit code."""
    import warnings

    if transport == "sse" and protocol == "modern":
        print(
            "mcp-lab probe: 2026-07-28 has no legacy SSE transport; "
            "use --protocol legacy or auto with --transport sse",
            file=sys.stderr,
        )
        return 2
    try:
        played = registry.get(scenario or registry.DEFAULT)
    except LookupError as exc:
        print(f"mcp-lab probe: {exc}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
    probe = Probe(url, uri or played.read_uri, timeout, protocol, token, transport, played)
    try:
        return anyio.run(probe.run)
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
