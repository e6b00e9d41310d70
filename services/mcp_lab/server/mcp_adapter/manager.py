"""The adapter's reach into mcp's Streamable HTTP session manager, which FastMCP
creates with the app and runs in its lifespan: :class:`HttpSessions` (how many sessions
are open, which one is ending idle, the session cap), and :func:`adjust_admitted`, the
hook by which the rest of the adapter adjusts each transport the manager admits (see
the package's docstring, :mod:`mcp_lab.server.mcp_adapter`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any

from fastmcp.server.http import StreamableHTTPASGIApp
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette


class HttpSessions:
    """What the lab needs to know of the Streamable HTTP session manager of an app.

    Relies on mcp 2.3's ``StreamableHTTPSessionManager``: its ``max_sessions`` is
    read on each admission (FastMCP 4 does not pass it, so it is set on the
    manager once it exists); ``_server_instances`` maps the open session ids to
    their transports; ``_admit_session`` returns None for a session refused at
    the limit (the manager then answers 503); each transport's ``idle_scope``
    is cancelled once no request has been in flight (an open GET stream counts)
    for ``session_idle_timeout``, which ends the session, runs its connection's
    exit stack (``on_session_end``) while the transport is still in
    ``_server_instances``, and afterwards makes its id answer 404.
    """

    def __init__(self) -> None:
        self._manager: StreamableHTTPSessionManager | None = None

    def open(self) -> int:
        """Sessions open now (0 before the app has started)."""
        return 0 if self._manager is None else len(self._manager._server_instances)

    def expired_idle(self, session_id: str) -> bool:
        """Whether the session ``session_id`` is ending because it was idle too long."""
        if self._manager is None:
            return False
        transport = self._manager._server_instances.get(session_id)
        scope = getattr(transport, "idle_scope", None)
        return scope is not None and bool(scope.cancel_called)

    def bind(
        self,
        app: Starlette,
        max_sessions: int,
        on_refused: Callable[[int], None],
        others: Callable[[], int] = lambda: 0,
    ) -> None:
        """Watch ``app``'s session manager from when its lifespan starts: at most
        ``max_sessions`` open, counting ``others()`` (sessions of other kinds) in;
        ``on_refused(open_count)`` for each one refused."""

        @contextmanager
        def watching(manager: StreamableHTTPSessionManager) -> Iterator[None]:
            manager.max_sessions = max_sessions
            admit = manager._admit_session

            def admit_or_refuse(requestor: Any) -> Any:
                open_now = len(manager._server_instances)
                if open_now + others() >= max_sessions:
                    on_refused(open_now)
                    return None  # the manager answers 503, as at its own limit
                transport = admit(requestor)
                if transport is None:
                    on_refused(open_now)
                return transport

            # mypy refuses assigning to a method; replacing it is the point here.
            manager._admit_session = admit_or_refuse  # type: ignore[method-assign]
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

        _while_serving(app, watching)


def _while_serving(
    app: Starlette,
    serving: Callable[[StreamableHTTPSessionManager], AbstractContextManager[None]],
) -> None:
    """Enter ``serving(manager)`` with ``app``'s session manager once the app's lifespan
    has started (FastMCP creates the manager with the app and runs it in its lifespan),
    and leave it as the lifespan ends."""
    endpoint = _streamable_endpoint(app)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(starlette: Starlette) -> AsyncIterator[Any]:
        async with inner(starlette) as state:
            with serving(_session_manager(endpoint)):
                yield state

    app.router.lifespan_context = lifespan


def adjust_admitted(app: Starlette, adjust: Callable[[Any], None]) -> None:
    """``adjust(transport)`` for each Streamable HTTP session ``app``'s session manager
    admits (a session refused gets no transport), before its first request is handled."""

    @contextmanager
    def adjusting(manager: StreamableHTTPSessionManager) -> Iterator[None]:
        admit = manager._admit_session

        def admit_adjusted(requestor: Any) -> Any:
            transport = admit(requestor)
            if transport is not None:
                adjust(transport)
            return transport

        # mypy refuses assigning to a method; replacing it is the point here.
        manager._admit_session = admit_adjusted  # type: ignore[method-assign]
        yield

    _while_serving(app, adjusting)


def _streamable_endpoint(app: Starlette) -> StreamableHTTPASGIApp:
    """The Streamable HTTP endpoint among ``app``'s routes."""
    endpoints = (getattr(route, "endpoint", None) for route in app.router.routes)
    return next(e for e in endpoints if isinstance(e, StreamableHTTPASGIApp))


def _session_manager(endpoint: StreamableHTTPASGIApp) -> StreamableHTTPSessionManager:
    """The endpoint's session manager, which FastMCP creates with the app."""
    manager = endpoint.session_manager
    if manager is None:
        raise RuntimeError("the Streamable HTTP endpoint has no session manager")
    return manager
