"""The server's MCP handlers, each named: the event log on initialize, discover,
list and read; reading a resource; subscribe and unsubscribe; the lab's tool."""

from __future__ import annotations

from typing import Any

import mcp_types
from fastmcp import Context
from fastmcp.server.dependencies import get_context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext

from mcp_lab import protocol, untrusted
from mcp_lab.catalog import ID_PLACEHOLDER, REVIEW_STATUS, ResourceSpec, TemplateSpec
from mcp_lab.contract import Peer
from mcp_lab.evidence.labels import SessionLabels
from mcp_lab.evidence.recorder import annotate
from mcp_lab.logs import event
from mcp_lab.server import mcp_adapter
from mcp_lab.server.delivery import session_delivery
from mcp_lab.server.service import Lab, not_found
from mcp_lab.server.sessions import Subscriber


def _cut(uri: str) -> str:
    """An unknown URI (the client's) for a log line: cut to ``untrusted.URI_CHARS``."""
    return untrusted.cut(uri, untrusted.URI_CHARS)


class EventLogMiddleware(Middleware):
    """Logs initialize and list, and answers unknown URIs on read.

    FastMCP's base ``__call__`` builds a chain of three or four wrapper closures
    (``on_message``, ``on_request``, the method's hook) for every message; this one
    calls the method's hook directly and passes every other message straight on.
    """

    def __init__(self, lab: Lab, labels: SessionLabels | None = None) -> None:
        self._lab = lab
        self._labels = labels
        self._hooks: dict[str, Any] = {
            protocol.INITIALIZE: self.on_initialize,
            protocol.DISCOVER: self.on_discover,
            protocol.LIST: self.on_list_resources,
            protocol.READ: self.on_read_resource,
        }

    async def __call__(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        hook = self._hooks.get(context.method or "")
        if hook is None or not mcp_adapter.typed_hooks_run_now():
            return await call_next(context)
        return await hook(context, call_next)

    async def on_initialize(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        result = await call_next(context)
        ctx = context.fastmcp_context
        if ctx is not None:
            params = getattr(context.message, "params", None)
            peer = self._lab.peer(ctx, params)
            self._lab.registry.remember(peer)
            self._lab.registry.listen_for_list(
                Subscriber(
                    peer,
                    session_delivery(
                        peer,
                        ctx.session.send_resource_updated,
                        ctx.session.send_resource_list_changed,
                    ),
                    told_listed=await self._lab.listed_now(peer),
                )
            )
            mcp_adapter.on_session_end(ctx.session, lambda: self._end_session(peer))
            event(
                protocol.INITIALIZE,
                "client connected",
                peer,
                f"protocol={peer.protocol} transport={peer.transport}{self._label(peer)}",
            )
        return result

    async def on_discover(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        if context.fastmcp_context is not None:
            peer = self._lab.peer(context.fastmcp_context)
            event(
                protocol.DISCOVER,
                "client connected",
                peer,
                f"protocol={peer.protocol} transport={peer.transport}{self._label(peer)}",
            )
        return await call_next(context)

    def _label(self, peer: Peer) -> str:
        """`` label=<label>``: the session's name in the dashboard and every report
        (services/mcp_lab/evidence/labels.py), once the server has the lab's label secret."""
        labels = self._labels
        return f" label={labels(peer.session)}" if labels is not None and labels.of_lab else ""

    async def on_list_resources(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        ctx = context.fastmcp_context
        if ctx is None:
            return await call_next(context)
        peer = self._lab.peer(ctx)
        event(protocol.LIST, "requested", peer)
        listed = await call_next(context)
        hidden = await self._lab.hidden_from(peer)
        return [r for r in listed if str(r.uri) not in hidden] if hidden else listed

    async def on_read_resource(self, context: MiddlewareContext[Any], call_next: CallNext) -> Any:
        uri = str(context.message.uri)
        ctx = context.fastmcp_context
        if ctx is not None and (uri not in self._lab.catalog or await self._hidden(ctx, uri)):
            event(protocol.READ, f"uri={_cut(uri)}", self._lab.peer(ctx), "error=not-found")
            raise not_found(uri, ctx.session.protocol_version)
        return await call_next(context)

    async def _hidden(self, ctx: Context, uri: str) -> bool:
        """Whether the scenario hides ``uri`` from the reader still (its peer is
        worked out only when the scenario hides anything)."""
        if not self._lab.scenario.hidden:
            return False
        return uri in await self._lab.hidden_from(self._lab.peer(ctx))

    async def _end_session(self, peer: Peer) -> None:
        idle = self._lab.http_sessions.expired_idle(peer.session)
        registry = self._lab.registry
        uris = registry.drop(peer.session)
        touched = registry.forget(peer.session)
        # The SDK gives this callback 5 s and then abandons it; in a burst of session
        # ends the Redis clean-up waits its turn longer than that, so it runs apart.
        self._lab.clean_up_later(peer, uris, idle=idle, touched=touched)


class Handlers:
    """The request handlers of ``lab``'s FastMCP server (registered by ``build_lab``)."""

    def __init__(self, lab: Lab, labels: SessionLabels | None = None) -> None:
        self._lab = lab
        self._labels = labels

    def reader(self, spec: ResourceSpec) -> Any:
        """The ``resources/read`` handler of ``spec``: its text for the reader's scope."""
        lab = self._lab

        async def read(ctx: Context) -> str:
            peer = lab.peer(ctx)
            version, text = await lab.read(peer, spec.uri)
            annotate(version=version)
            event(
                protocol.READ,
                f"uri={spec.uri} version={version}",
                peer,
                level=lab.read_level(peer, spec.uri, version),
            )
            return text

        return read

    def template_reader(self, template: TemplateSpec) -> Any:
        """The ``resources/read`` handler of ``template``'s resources (``{id}`` given)."""
        lab = self._lab

        async def read(id: str, ctx: Context) -> str:
            uri = template.uri_template.replace(ID_PLACEHOLDER, id)
            peer = lab.peer(ctx)
            version, text = await lab.read(peer, uri)
            annotate(version=version)
            event(
                protocol.READ,
                f"uri={uri} version={version}",
                peer,
                level=lab.read_level(peer, uri, version),
            )
            return text

        return read

    async def get_review_status(self, ctx: Context) -> str:
        """The lab's tool (``MCP_TEST_ENABLE_TOOL``): the status text, as a read gives it."""
        peer = self._lab.peer(ctx)
        version, text = await self._lab.read(peer, REVIEW_STATUS.uri)
        event(protocol.TOOLS_CALL, f"get_review_status version={version}", peer)
        return text

    async def subscribe(
        self, _: Any, params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        lab = self._lab
        ctx = get_context()
        peer = lab.peer(ctx)
        uri = str(params.uri)
        if uri not in lab.catalog:
            event(protocol.SUBSCRIBE, f"uri={_cut(uri)}", peer, "error=not-found")
            raise not_found(uri, peer.protocol)
        session = ctx.session
        stream = mcp_adapter.get_stream_of(lab.http_sessions, session)
        subscriber = Subscriber(
            peer,
            session_delivery(
                peer, session.send_resource_updated, session.send_resource_list_changed, stream
            ),
        )
        job_id = await lab.subscribe(subscriber, uri)
        event(protocol.SUBSCRIBE, f"uri={uri}", peer, f"job={job_id}")
        return mcp_types.EmptyResult()

    async def unsubscribe(
        self, _: Any, params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        lab = self._lab
        peer = lab.peer(get_context())
        uri = str(params.uri)
        if uri not in lab.catalog:
            event(protocol.UNSUBSCRIBE, f"uri={_cut(uri)}", peer, "error=not-found")
            raise not_found(uri, peer.protocol)
        was_subscribed = lab.registry.unsubscribe(peer.session, uri)
        await lab.forget_subscription(peer, uri)
        event(protocol.UNSUBSCRIBE, f"uri={uri}", peer, f"was_subscribed={was_subscribed}")
        return mcp_types.EmptyResult()
