"""What a scenario is: one question the lab asks a client, as data.

A :class:`Scenario` names the question and what a user learns from it, the resources
it serves (a :class:`~mcp_lab.catalog.Catalog`), the server's timeline after a
client subscribes to its watched resource (:class:`Action`: update it, or list a
resource that was hidden and send ``notifications/resources/list_changed``), and its
own checkpoints, scored from a session's evidence (:class:`Check`) beside the levels
(0-7), which every scenario keeps for its watched resource. How the clients runner's
scripted model and the probe play it is said by :attr:`Scenario.play`.

Adding a scenario is one new module in this package that defines ``SCENARIO`` (the
registry imports every module here), plus its test; a test may also register one of
its own with :func:`mcp_lab.scenarios.registry.register`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from mcp_lab import contract
from mcp_lab.catalog import Catalog
from mcp_lab.contract import Event

UPDATE, ADD = contract.UPDATE_ACTION, contract.ADD_ACTION


@dataclass(frozen=True, slots=True)
class Action:
    """One step of a scenario's timeline: ``after`` seconds past the first due time
    (``MCP_TEST_UPDATE_DELAY_SECONDS`` after the subscribe that starts the timeline),
    ``kind`` (:data:`UPDATE` the resource and notify its subscribers, or :data:`ADD`
    a hidden resource to the list and send ``list_changed``) on ``uri`` (None: the
    resource the client subscribed to)."""

    after: float = 0.0
    kind: str = UPDATE
    uri: str | None = None


@dataclass(frozen=True, slots=True)
class ListenClose:
    """How the lab ends each 2026-07-28 ``subscriptions/listen`` stream of a scenario
    (``basic/patterns/subscriptions.mdx``, "Graceful Closure"): ``after`` seconds past
    the stream's first update notification, with the final ``{resultType: "complete"}``
    result. A client is then watched for ``window`` seconds: a graceful close means the
    server ended the subscription, so an ideal client does not listen again in it."""

    after: float
    window: float

    def __post_init__(self) -> None:
        if self.after < 0 or self.window <= 0:
            raise ValueError(f"listen close after {self.after} s, window {self.window} s")


@dataclass(frozen=True, slots=True)
class ListenDrop:
    """How the lab drops a client's first 2026-07-28 ``subscriptions/listen`` stream of
    a scenario: ``after`` seconds past its acknowledgement (before its update is due),
    the stream ends *without* the final result, an abnormal drop
    (``basic/patterns/subscriptions.mdx``, "Graceful Closure"; over stdio the
    connection itself ends). The lab keeps the client's subscription for ``keep``
    seconds: the update still happens, and a client that listens again is told of it
    (at once, when it came while the client was away)."""

    after: float
    keep: float = 60.0

    def __post_init__(self) -> None:
        if self.after < 0 or self.keep <= 0:
            raise ValueError(f"listen drop after {self.after} s, kept {self.keep} s")


@dataclass(frozen=True, slots=True)
class Check:
    """One of a scenario's own checkpoints, as scored for one session."""

    key: str
    title: str  # the column or line title
    answer: str  # "yes", "no", "2/3", ...
    at_ms: int | None = None  # when it was reached (the last step of it), if it was
    ok: bool = False  # whether the client did what the ideal client does


# A scenario's own checkpoints, from the events of one session (sorted by time) and
# the URI its levels score.
CheckSession = Callable[[list[Event], str], list[Check]]


def no_checks(events: list[Event], uri: str) -> list[Check]:
    """A scenario with nothing to check beyond the levels."""
    return []


@dataclass(frozen=True, slots=True)
class Play:
    """How the scenario is played: by the clients runner (its scripted model, the
    runner's own updates; which clients it applies to) and by the probe (the ideal
    client)."""

    # What the scored run's model is asked (``{uri}``: the watched resource).
    prompt: str = "Read the MCP resource {uri} of the MCP server 'lab' and tell me its status."
    # The clients (by name in services/mcp_lab/runners/clients/pins.py) it applies to; empty: all.
    clients: frozenset[str] = frozenset()
    # Whether the scored model attaches the resource in its prompt (``@lab:URI``)
    # instead of reading it with a tool.
    attach: bool = False
    # Whether the runner also makes a pull run (the model asks to read again).
    pull: bool = False
    # Whether the runner runs it twice, without and with the lab's tool.
    tool_setups: bool = False
    # Whether the scored model first lists the resource templates (the CLI's tool for
    # it, when it offers one) before it reads.
    list_templates: bool = False
    # The ideal client (the probe) unsubscribes after this many updates, and then
    # checks that the rest of the timeline notifies it of nothing.
    unsubscribe_after: int | None = None
    # Catalog URIs the ideal client (the probe) also names in its 2026-07-28 listen,
    # beside the one it probes (and reads itself when the acknowledgement leaves one out).
    also_watch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """One question the lab asks (see the module docstring)."""

    name: str
    summary: str  # one line: what a user learns from it
    catalog: Catalog
    watched: str  # the URI its levels score, whose subscribe starts the timeline
    timeline: tuple[Action, ...] = (Action(),)
    checks: CheckSession = no_checks
    # Catalog URIs left out of resources/list (and unreadable) until an ADD shows them.
    hidden: frozenset[str] = frozenset()
    play: Play = field(default_factory=Play)
    # The URI a client of this scenario reads, when it is not ``watched`` itself (a
    # template scenario: a concrete URI of the template).
    example_uri: str | None = None
    # The caching hints of every cacheable 2026-07-28 result (server/discover, the lists,
    # resources/read; server/utilities/caching.mdx): how long a client may keep one
    # (0: immediately stale, the lab's default, so every update is re-read) and who may.
    cache_ttl_ms: int = 0
    cache_scope: Literal["public", "private"] = "private"
    # How the lab ends its listen streams (None: only when the client closes one, or
    # when the server stops).
    listen_close: ListenClose | None = None
    # How the lab drops each client's first listen stream (None: it never does).
    listen_drop: ListenDrop | None = None
    # Catalog URIs a 2026-07-28 listen may name that its acknowledgement leaves out (the
    # lab does not watch them: a partial ack); resources/subscribe is not affected.
    unacknowledged: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.cache_ttl_ms < 0:  # caching.mdx: "a `ttlMs` value that is `>= 0`"
            raise ValueError(f"scenario {self.name}: cache_ttl_ms {self.cache_ttl_ms} < 0")
        if self.listen_close is not None and self.listen_drop is not None:
            raise ValueError(f"scenario {self.name}: a listen is closed or dropped, not both")
        if self.cache_scope not in ("public", "private"):
            raise ValueError(f"scenario {self.name}: cache_scope {self.cache_scope!r}")
        if not self.catalog.names(self.watched):
            raise ValueError(f"scenario {self.name}: watched {self.watched} is not served")
        if self.example_uri is not None and not self.starts_timeline(self.example_uri):
            raise ValueError(f"scenario {self.name}: {self.example_uri} is not {self.watched}")
        for action in self.timeline:
            if action.uri is not None and action.uri not in self.catalog:
                raise ValueError(f"scenario {self.name}: {action.uri} is not served")
        for uri in (*self.unacknowledged, *self.play.also_watch):
            if uri not in self.catalog:
                raise ValueError(f"scenario {self.name}: {uri} is not served")
        unknown = [uri for uri in self.hidden if uri not in self.catalog]
        if unknown:
            raise ValueError(f"scenario {self.name}: hidden {unknown} are not served")

    @property
    def read_uri(self) -> str:
        """The URI a client is asked to read and subscribe to."""
        return self.example_uri or self.watched

    def scored_uri(self, events: list[Event]) -> str:
        """The URI the levels score in one session's ``events``: ``watched``, or (a
        template) the first of its resources the session named."""
        if self.watched in self.catalog:
            return self.watched
        named = (e.uri for e in events if e.direction == "in" and e.uri is not None)
        return next((u for u in named if self.starts_timeline(u)), self.read_uri)

    def starts_timeline(self, uri: str) -> bool:
        """Whether a subscribe to ``uri`` starts the timeline (else: one update)."""
        return self.catalog.same_resource(uri, self.watched)

    def jobs(self, uri: str, target: str, delay: float) -> list[contract.UpdateJob]:
        """The jobs a subscribe of ``target`` to ``uri`` queues, ``delay`` being the
        lab's update delay."""
        if not self.starts_timeline(uri):
            return [contract.UpdateJob(uri=uri, target=target, delay=delay, while_subscribed=True)]
        return [
            contract.UpdateJob(
                uri=action.uri or uri,
                target=target,
                delay=delay + action.after,
                action=action.kind,
                while_subscribed=action.kind == UPDATE and action.uri is None,
            )
            for action in self.timeline
        ]
