"""The probe's subscription at 2026-07-28: a ``subscriptions/listen`` naming the probed
URI (and list changes, when the scenario's timeline adds a resource), kept open for the
flow, its events fed to the notifications the flow waits for; closing it is the
unsubscribe. Before 2026-07-28 the flow subscribes with ``resources/subscribe`` instead
(:class:`mcp_lab.runners.probe.Probe`).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_lab import protocol
from mcp_lab.runners.probe_connection import LIST_CHANGED, UPDATED
from mcp_lab.runners.probe_output import SUBSCRIBE_REFUSED, ProbeFailed, reason
from mcp_lab.runners.probe_steps import ProbeSteps
from mcp_lab.scenarios.scenario import ADD


class ProbeListen(ProbeSteps):
    """The 2026-07-28 listen (see :class:`mcp_lab.runners.probe.Probe`)."""

    async def _listen(self, client: Client, stack: AsyncExitStack) -> None:
        """Open a listen naming the URI (kept open by ``stack``); its events feed the
        notifications the flow waits for."""
        wants_list = any(a.kind == ADD for a in self._plan())
        try:
            subscription = await stack.enter_async_context(
                client.listen(resource_subscriptions=[self.uri], resources_list_changed=wants_list)
            )
        except MCPError as exc:
            raise ProbeFailed(SUBSCRIBE_REFUSED, "subscribe", reason(exc)) from exc
        self.emit(
            "subscribed",
            method=protocol.LISTEN,
            honored=subscription.honored.resource_subscriptions,
        )
        self._listening = True
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)

        async def feed() -> None:
            async for change in subscription:
                uri = getattr(change, "uri", None)
                await self._sent.send((UPDATED if uri is not None else LIST_CHANGED, uri))

        tasks.start_soon(feed)
