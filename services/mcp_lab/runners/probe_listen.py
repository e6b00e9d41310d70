"""The probe's subscription at 2026-07-28: a ``subscriptions/listen`` naming the probed
URI (and list changes, when the scenario's timeline adds a resource), kept open for the
flow, its events fed to the notifications the flow waits for; closing it is the
unsubscribe. Before 2026-07-28 the flow subscribes with ``resources/subscribe`` instead
(:class:`mcp_lab.runners.probe.Probe`). When the scenario has the server end the stream
(``Scenario.listen_close``), the probe waits for that end and then listens no more; a
URI the acknowledgement leaves out (``Play.also_watch`` names more) it reads itself.
When the server drops the stream without its final result (``Scenario.listen_drop``),
the probe listens again (over stdio on a new connection, the server started again).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
from mcp import Client
from mcp.client.subscriptions import Subscription, SubscriptionLost
from mcp.shared.exceptions import MCPError

from mcp_lab import protocol
from mcp_lab.runners.probe_connection import LIST_CHANGED, STDIO, UPDATED
from mcp_lab.runners.probe_output import (
    NOT_FOUND,
    PROTOCOL_ERROR,
    SUBSCRIBE_REFUSED,
    ProbeFailed,
    reason,
)
from mcp_lab.runners.probe_steps import ProbeSteps, content_text
from mcp_lab.scenarios.scenario import ADD, ListenClose


class ProbeListen(ProbeSteps):
    """The 2026-07-28 listen (see :class:`mcp_lab.runners.probe.Probe`)."""

    async def _listen(self, client: Client, stack: AsyncExitStack) -> None:
        """Open a listen naming the URI (kept open by ``stack``); its events feed the
        notifications the flow waits for."""
        wants_list = any(a.kind == ADD for a in self._plan())
        named = [self.uri, *(self.prefix + uri for uri in self.scenario.play.also_watch)]
        try:
            subscription = await stack.enter_async_context(
                client.listen(resource_subscriptions=named, resources_list_changed=wants_list)
            )
        except MCPError as exc:
            raise ProbeFailed(SUBSCRIBE_REFUSED, "subscribe", reason(exc)) from exc
        honored = list(subscription.honored.resource_subscriptions or [])
        self.emit("subscribed", method=protocol.LISTEN, honored=honored)
        for uri in (u for u in named[1:] if u not in honored):
            # Not watched: nothing will say when it changes, so read it now.
            read = await self._call("read", NOT_FOUND, client.read_resource(uri))
            self.emit("unwatched_read", uri=uri, text=content_text(read))
        self._listening = True
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)

        async def feed() -> None:
            try:
                await self._feed(subscription)
            except (SubscriptionLost, MCPError) as lost:
                if self.scenario.listen_drop is None:
                    self._listen_lost = True
                    if self.scenario.listen_close is None:
                        raise
                else:  # dropped-stream: the server dropped it; listen again
                    self.emit("listen_dropped", error=reason(lost) or type(lost).__name__)
                    await self._listen_again(client, named, wants_list)
            self._listen_ended.set()

        tasks.start_soon(feed)

    async def _feed(self, subscription: Subscription) -> None:
        """The listen's events, to the notifications the flow waits for."""
        async for change in subscription:
            uri = getattr(change, "uri", None)
            await self._sent.send((UPDATED if uri is not None else LIST_CHANGED, uri))

    async def _listen_again(self, client: Client, named: list[str], wants_list: bool) -> None:
        """After a drop: over HTTP a new listen on the same client; over stdio the
        connection is gone, so a new one (the server started again) and a new listen
        ("after a stdio reconnect the client MUST listen again"). The flow reads with
        the new connection from then on."""
        async with AsyncExitStack() as again:
            if self.transport == STDIO:
                client = await again.enter_async_context(self._stdio_client())
                self._reconnected = client
            try:
                subscription = await again.enter_async_context(
                    client.listen(resource_subscriptions=named, resources_list_changed=wants_list)
                )
            except MCPError as exc:
                raise ProbeFailed(SUBSCRIBE_REFUSED, "listen_again", reason(exc)) from exc
            honored = list(subscription.honored.resource_subscriptions or [])
            self.emit("listened_again", method=protocol.LISTEN, honored=honored)
            await self._feed(subscription)

    async def _until_closed(self, close: ListenClose) -> None:
        """The server ends the listen stream itself: wait (at most --timeout) for its
        final result, then listen no more while the scenario's window passes (a graceful
        close ended the subscription; the ideal client does not open another)."""
        with anyio.move_on_after(self.timeout):
            await self._listen_ended.wait()
        if not self._listen_ended.is_set():
            message = f"the server did not end the listen stream within {self.timeout}s"
            raise ProbeFailed(PROTOCOL_ERROR, "listen_end", message)
        if self._listen_lost:
            message = "the listen stream dropped without its final result"
            raise ProbeFailed(PROTOCOL_ERROR, "listen_end", message)
        self.emit("listen_completed", result_type="complete")
        with anyio.move_on_after(close.window):
            async for got, uri in self._arrived:
                if got == UPDATED and uri == self.uri:
                    message = "a notification arrived after the graceful close"
                    raise ProbeFailed(PROTOCOL_ERROR, "quiet", message)
        self.emit("stayed_closed", watched_s=close.window, listened_again=0)
