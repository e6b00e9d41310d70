"""The Redis contract between the server and the updater.

Everything the two processes agree on about Redis is named here and nowhere else: the
key and stream names, and the format of the messages on the updates channel and the job
stream. What the resources are and what they say is in :mod:`mcp_lab.catalog`. Both
processes import both modules; nothing but Redis passes between them.

Redis layout (``{uri}`` is a catalog URI, ``{scope}`` a session id or ``shared``):

``mcp:state:{scope}:{uri}``      hash ``version``, ``text``; absent, or not the lab's
                                 (see ``state.read_state``), means version 1
``mcp:subscribers:{uri}``        set of session ids subscribed to ``uri`` (all replicas)
``mcp:jobs``                     stream of update jobs, consumed by group ``updaters``
``mcp:updater:{consumer}:alive``  ``host:pid`` of a working updater, expires shortly after;
                                 others take over the pending jobs of a consumer without one
``mcp:events``                   stream of evidence: every message in and notification out
``mcp:events:lost``              stream of counts of events that could not be recorded
``mcp:runs``                     stream of observation-run starts (``mcp-lab reset``, or a server
                                 that plays another scenario than the last run); a run's id is
                                 above every event before it and below every event after it
                                 (``evidence.reader.start_run``); fields ``reason``, ``scenario``
                                 (played and scored under), ``previous_scenario`` (played before)
``mcp:scenario``                 the scenario the running lab plays (``MCP_TEST_SCENARIO``)
``mcp:store:epoch``              random id of this Redis's data, set (if absent) by server and
                                 updater: gone or changed after a reconnect, the data was lost
``mcp:state-scope``              the running lab's ``MCP_TEST_STATE_SCOPE`` (session or shared)
``mcp:dashboard:label-secret``   hex secret the dashboard's session labels are made with
``mcp:listed:{scope}``           set of the hidden resources a scenario has listed for ``scope``
``mcp:listen-dropped:{session}``  JSON ``{uri: version}`` of a listen stream dropped-stream cut
``mcp:resume:{session}``          stream of the SSE events sent to one Streamable HTTP
                                 session (fields ``stream``, ``message``, ``tag``), for replay
``mcp:session:{session}``         id of the server replica holding the session
``mcp:replica:{replica}:alive``   set by a running server replica, expires shortly after
``mcp:replica:{replica}:live``    pub/sub channel the replica's relay listens on (nobody
                                 publishes there): it has a subscriber exactly while the
                                 replica's process lives, gone at once when it is killed
``mcp:replica:{replica}:sessions`` set of the subscribed session ids a replica holds; once its
                                 heartbeat is gone, any replica drops them from the subscriber sets
updates channel                  pub/sub, default ``mcp:resources:updated``: a bare URI,
                                 or JSON (one session's update, or the updater's batch
                                 naming many sessions: see parse_update_messages)
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mcp_lab import protocol
from mcp_lab.catalog import Catalog
from mcp_lab.protocol import Transport
from mcp_lab.untrusted import cut

SHARED_SCOPE = "shared"
ALL_SUBSCRIBERS = "*"

JOBS_STREAM = "mcp:jobs"
JOBS_GROUP = "updaters"
STATE_KEY_PREFIX = "mcp:state:"
SUBSCRIBERS_KEY_PREFIX = "mcp:subscribers:"


def scope_of(session: str, state_scope: str) -> str:
    """Whose state a session reads: its own (``session`` scope) or the shared one."""
    return SHARED_SCOPE if state_scope == SHARED_SCOPE else session


def state_key(scope: str, uri: str) -> str:
    """Key of the state hash of one scope (a session id, or ``shared``)."""
    return f"{STATE_KEY_PREFIX}{scope}:{uri}"


UPDATER_HEARTBEAT_SECONDS = 15  # default heartbeat lifetime (MCP_TEST_UPDATER_HEARTBEAT_SECONDS)


def updater_heartbeat_key(consumer: str) -> str:
    """Key an updater refreshes while it works; its healthcheck looks for it."""
    return f"mcp:updater:{consumer}:alive"


# Resumable Streamable HTTP streams: every SSE event a session is sent is kept in its
# resume stream; an entry with an empty ``message`` is a priming event (an id, no message).
# An event's id (the ``Last-Event-ID`` a client resumes with) is ``<entry id>_<tag>``, with
# the entry's random ``tag``: not guessable from the time (server/resume/eventstore.py).
RESUME_STREAM_FIELD = "stream"
RESUME_MESSAGE_FIELD = "message"
RESUME_TAG_FIELD = "tag"
REPLICA_HEARTBEAT_SECONDS = 15  # default heartbeat lifetime (MCP_TEST_REPLICA_HEARTBEAT_SECONDS)


def resume_key(session: str) -> str:
    """Stream of the SSE events sent to ``session``, kept for replay."""
    return f"mcp:resume:{session}"


def session_owner_key(session: str) -> str:
    """Key naming the server replica that holds ``session``."""
    return f"mcp:session:{session}"


def replica_heartbeat_key(replica: str) -> str:
    """Key a server replica refreshes while it runs."""
    return f"mcp:replica:{replica}:alive"


def replica_channel(replica: str) -> str:
    """The channel ``replica`` listens on while its process lives (``PUBSUB NUMSUB``)."""
    return f"mcp:replica:{replica}:live"


REPLICA_SESSIONS_PATTERN = "mcp:replica:*:sessions"


def replica_sessions_key(replica: str) -> str:
    """Set of the subscribed sessions ``replica`` holds (they die with it)."""
    return f"mcp:replica:{replica}:sessions"


def replica_of_sessions_key(key: str) -> str:
    """The replica id in a :func:`replica_sessions_key`."""
    return key.removeprefix("mcp:replica:").removesuffix(":sessions")


def is_event_id(value: str) -> bool:
    """Whether ``value`` has the shape of an event id (a stream entry id ``ms-seq``)."""
    millis, dash, seq = value.partition("-")
    return bool(dash) and millis.isdigit() and seq.isdigit() and len(value) <= 41


SCENARIO_KEY = "mcp:scenario"  # the scenario the running lab plays (set by the server at start)
# Redis came back without its data when this is gone or changed (server/restore.py).
STORE_EPOCH_KEY = "mcp:store:epoch"
# The running lab's state scope (MCP_TEST_STATE_SCOPE), set by its server and its updater
# at start: a command of another shell (trigger) acts in the lab's scope, not its own.
STATE_SCOPE_KEY = "mcp:state-scope"
# The secret under which the dashboard labels sessions (mcp_lab.evidence.labels).
LABEL_SECRET_KEY = "mcp:dashboard:label-secret"
LISTED_KEY_PREFIX = "mcp:listed:"
DROPPED_KEY_PREFIX = "mcp:listen-dropped:"  # + a 2026-07-28 client's key (layout above)


def listed_key(scope: str) -> str:
    """Set of the hidden resources a scenario has added to ``scope``'s list."""
    return f"{LISTED_KEY_PREFIX}{scope}"


def subscribers_key(uri: str) -> str:
    """Key of the set of session ids subscribed to ``uri``."""
    return f"{SUBSCRIBERS_KEY_PREFIX}{uri}"


# Every subscriber set (a template's resources have one per URI a client chose).
SUBSCRIBERS_PATTERN = f"{SUBSCRIBERS_KEY_PREFIX}*"


def uri_of_subscribers_key(key: str) -> str:
    """The URI of a :func:`subscribers_key`."""
    return key.removeprefix(SUBSCRIBERS_KEY_PREFIX)


# What a message on the updates channel says happened to its resource.
UPDATED_KIND, LISTED_KIND = "updated", "listed"
MESSAGE_KINDS = frozenset({UPDATED_KIND, LISTED_KIND})


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    """One update on the updates channel, parsed (:func:`parse_update_messages`).

    ``session`` is None when every subscribed session should be notified; ``version``
    is None when the sender did not say (a bare URI). ``due_ms`` is when the lab promised
    the update (a job's entry time plus its delay, ms since the epoch), None for a
    hand-made publish: the relay records it with the notification, so the report can
    tell the lab's lateness from the client's.
    """

    uri: str
    session: str | None = None
    version: int | None = None
    # UPDATED_KIND (the resource changed) or LISTED_KIND (it was listed: send list_changed).
    kind: str = UPDATED_KIND
    due_ms: int | None = None

    def encode(self) -> str:
        """Wire form: JSON of ``uri`` and the known ``session``, ``version``, ``due``, ``kind``."""
        body: dict[str, object] = {"uri": self.uri}
        if self.session is not None:
            body["session"] = self.session
        if self.version is not None:
            body["version"] = self.version
        if self.due_ms is not None:
            body["due"] = self.due_ms
        if self.kind != UPDATED_KIND:
            body["kind"] = self.kind
        return json.dumps(body, separators=(",", ":"))


def encode_updates(uri: str, updates: list[tuple[str, int, int | None]]) -> str:
    """The wire form of many sessions' updates of ``uri`` in one message:
    ``{"uri": ..., "sessions": [[session, version, due], ...]}`` (``due`` null when
    unknown). The updater publishes this form for a batch of due jobs."""
    body = {"uri": uri, "sessions": [list(update) for update in updates]}
    return json.dumps(body, separators=(",", ":"))


class BadMessage(ValueError):
    """A payload on the updates channel that the relay cannot use."""


MAX_MESSAGE_BYTES = 64 * 1024
# How many sessions one batched message names at most (also bounded by its bytes:
# see state_jobs._APPLY_JOBS). A batch of due jobs is split into messages of this size.
MAX_SESSIONS_PER_MESSAGE = 200


def parse_update_messages(payload: bytes | str, catalog: Catalog) -> list[UpdateMessage]:
    """Parse a payload from the updates channel into the updates it carries.

    Accepted forms: a bare URI (``test://review/status``), what a person types into
    ``redis-cli publish``; a JSON object where only ``uri`` is required:
    ``{"uri": ..., "session": ..., "version": ..., "due": ...}``; or the updater's batch
    form (:func:`encode_updates`), one update per session. Raises :class:`BadMessage`
    with a reason for anything else, including a URI that is not in the catalog.
    """
    if len(payload) > MAX_MESSAGE_BYTES:
        raise BadMessage(f"payload of {len(payload)} bytes is over {MAX_MESSAGE_BYTES}")
    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadMessage("payload is not UTF-8") from exc
    text = payload.strip()
    if not text:
        raise BadMessage("empty payload")
    if text.startswith("{"):
        messages = _parse_json_message(text)
    else:
        messages = [UpdateMessage(uri=text)]
    if messages[0].uri not in catalog:
        raise BadMessage(f"unknown uri {messages[0].uri!r}")
    return messages


def _parse_json_message(text: str) -> list[UpdateMessage]:
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadMessage(f"invalid JSON: {exc.msg}") from exc
    if not isinstance(body, dict):
        raise BadMessage("JSON payload is not an object")
    uri = body.get("uri")
    if not isinstance(uri, str) or not uri:
        raise BadMessage("JSON payload has no string 'uri'")
    if "sessions" in body:
        return _parse_batch(uri, body)
    session = body.get("session")
    if session is not None and (not isinstance(session, str) or not session):
        raise BadMessage("'session' must be a non-empty string")
    version = _optional_int(body, "version")
    due = _due(_optional_int(body, "due"))
    kind = body.get("kind", UPDATED_KIND)
    if kind not in MESSAGE_KINDS:
        raise BadMessage(f"'kind' must be one of {sorted(MESSAGE_KINDS)}")
    return [UpdateMessage(uri=uri, session=session, version=version, kind=kind, due_ms=due)]


def _optional_int(body: dict[str, object], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadMessage(f"'{name}' must be an integer")
    return value


def _parse_batch(uri: str, body: dict[str, object]) -> list[UpdateMessage]:
    """The batch form: ``sessions`` a non-empty list of ``[session, version, due]``."""
    sessions = body["sessions"]
    if not isinstance(sessions, list) or not sessions:
        raise BadMessage("'sessions' must be a non-empty list")
    out: list[UpdateMessage] = []
    for item in sessions:
        if not (isinstance(item, list) and len(item) == 3):
            raise BadMessage("each of 'sessions' must be [session, version, due]")
        session, version, due = item
        if not isinstance(session, str) or not session:
            raise BadMessage("a session in 'sessions' must be a non-empty string")
        for value in (version, due):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BadMessage("a version or due in 'sessions' must be an integer")
        out.append(UpdateMessage(uri=uri, session=session, version=version, due_ms=_due(due)))
    return out


def _due(value: int | None) -> int | None:
    if value is not None and not 0 <= value <= LAST_EVENT_MS:
        raise BadMessage(f"'due' {cut(str(value), 40)} is outside 0..{LAST_EVENT_MS} ms")
    return value


# What a job does (its ``action`` field; absent: an update).
UPDATE_ACTION = "update"  # bump the resource's version and notify its subscribers
ADD_ACTION = "add"  # list a resource hidden until now and send list_changed
JOB_ACTIONS = frozenset({UPDATE_ACTION, ADD_ACTION})
# A job field: "1" when the job updates its session only while it is subscribed.
WHILE_SUBSCRIBED_FIELD = "while_subscribed"


@dataclass(frozen=True, slots=True)
class UpdateJob:
    """One entry of the job stream: act on ``uri`` for ``target`` after ``delay`` seconds.

    ``target`` is a session id, ``shared``, or ``*`` (every subscribed session, or the shared
    state in shared scope). ``delay`` None means the updater's configured delay. ``action`` is
    :data:`UPDATE_ACTION` (the scenario's update) or :data:`ADD_ACTION` (a scenario's new
    resource). The stream entry id carries the time the job was made. ``while_subscribed`` (the
    jobs a subscribe queues): a session's state is updated only if it is still subscribed to
    ``uri`` when the job is applied, so one that left leaves no state behind.
    """

    uri: str
    target: str
    delay: float | None = None
    action: str = UPDATE_ACTION
    while_subscribed: bool = False

    def fields(self) -> dict[str, str]:
        """The stream entry's fields."""
        out = {"uri": self.uri, "target": self.target}
        if self.delay is not None:
            out["delay"] = repr(float(self.delay))
        if self.action != UPDATE_ACTION:
            out["action"] = self.action
        if self.while_subscribed:
            out[WHILE_SUBSCRIBED_FIELD] = "1"
        return out


def parse_job(fields: dict[str, str], catalog: Catalog) -> UpdateJob:
    """Parse the fields of a job stream entry; raises :class:`BadMessage`."""
    uri = fields.get("uri", "")
    if uri not in catalog:
        raise BadMessage(f"unknown uri {uri!r}")
    target = fields.get("target") or ALL_SUBSCRIBERS
    raw_delay = fields.get("delay")
    delay: float | None = None
    if raw_delay is not None:
        try:
            delay = float(raw_delay)
        except ValueError as exc:
            raise BadMessage(f"delay {raw_delay!r} is not a number") from exc
        if not 0 <= delay <= 86400:
            raise BadMessage(f"delay {delay} is outside 0..86400")
    action = fields.get("action") or UPDATE_ACTION
    if action not in JOB_ACTIONS:
        raise BadMessage(f"action {cut(action, 40)!r} is not one of {sorted(JOB_ACTIONS)}")
    subscribed = fields.get(WHILE_SUBSCRIBED_FIELD) == "1"
    return UpdateJob(
        uri=uri, target=target, delay=delay, action=action, while_subscribed=subscribed
    )


def entry_time_ms(entry_id: str) -> int:
    """Milliseconds since the epoch at which a stream entry was added (from its id)."""
    return int(entry_id.split("-", 1)[0])


EVENTS_STREAM = "mcp:events"
EVENTS_LOST_STREAM = "mcp:events:lost"  # one entry per gap: count, first_ms, last_ms
RUNS_STREAM = "mcp:runs"


@dataclass(frozen=True, slots=True)
class Peer:
    """Who sent a message: the MCP session and the client behind it (its ``clientInfo``)."""

    session: str
    client_name: str = protocol.UNKNOWN_CLIENT
    client_version: str = "?"
    protocol: str = "?"
    transport: Transport | str = "?"

    @property
    def client(self) -> str:
        """``name/version``, as the log shows it."""
        return f"{self.client_name}/{self.client_version}"

    @property
    def on_streamable_http(self) -> bool:
        """Whether notifications need the session's GET stream (SSE, stdio: the connection)."""
        return self.transport == Transport.STREAMABLE_HTTP


# The JSON-RPC error code of a subscribe refused: its session holds the most subscriptions
# allowed (MCP_TEST_MAX_SUBSCRIPTIONS_PER_SESSION). The evidence records it, the report counts it.
SUBSCRIPTION_LIMIT_ERROR = -32010

REASON_IDLE = "idle"
REASON_UNADVERTISED = "unadvertised"
# A session/end recorded for a session whose server replica died (see lifecycle.py).
REASON_REPLICA_GONE = "replica-gone"


@dataclass(frozen=True, slots=True)
class Event:
    """One piece of evidence: a message a client sent, or a notification sent to it.

    ``delivered`` is set for notifications only: whether the session had an open stream to carry
    it when it was sent. ``resumed`` marks a notification written to a stream the client resumed
    with ``Last-Event-ID`` (a replay, or the live tail served by another replica). ``error`` is
    the JSON-RPC error code the server answered with, if any. ``reason`` says why the server did
    something the client did not ask for: :data:`REASON_IDLE` on a ``session/end`` (the server
    closed a session the client had left open), :data:`REASON_REPLICA_GONE` on a ``session/end``
    of a session that died with its server (its ``uri`` and ``version``: the version its state
    had then, so an update applied but never delivered shows), :data:`REASON_UNADVERTISED` on a
    list request answered though its capability was not advertised. ``due_ms`` is set on a
    notification the lab promised for a time (an update job's entry time plus its delay): sent
    minus due is the lab's own lateness, never the client's.
    """

    ts_ms: int
    session: str
    client: str
    client_version: str
    protocol: str
    transport: str  # a Transport value, or "?"
    direction: str  # "in" (client to server) or "out" (server to client)
    method: str
    uri: str | None = None
    version: int | None = None
    delivered: bool | None = None
    error: int | None = None
    resumed: bool = False
    reason: str | None = None
    due_ms: int | None = None

    def fields(self) -> dict[str, str]:
        """The stream entry's fields (absent values are left out)."""
        out = {
            "ts": str(self.ts_ms),
            "session": self.session,
            "client": self.client,
            "client_version": self.client_version,
            "protocol": self.protocol,
            "transport": self.transport,
            "direction": self.direction,
            "method": self.method,
        }
        if self.uri is not None:
            out["uri"] = self.uri
        if self.version is not None:
            out["version"] = str(self.version)
        if self.delivered is not None:
            out["delivered"] = "1" if self.delivered else "0"
        if self.error is not None:
            out["error"] = str(self.error)
        if self.resumed:
            out["resumed"] = "1"
        if self.reason is not None:
            out["reason"] = self.reason
        if self.due_ms is not None:
            out["due"] = str(self.due_ms)
        return out

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> Event:
        """Parse a stream entry; raises :class:`BadMessage` with a short reason (never the
        fields themselves) for anything the lab would not have recorded."""
        try:
            event = cls(
                ts_ms=int(fields["ts"]),
                session=fields["session"],
                client=fields["client"],
                client_version=fields["client_version"],
                protocol=fields["protocol"],
                transport=fields["transport"],
                direction=fields["direction"],
                method=fields["method"],
                uri=fields.get("uri"),
                version=int(fields["version"]) if "version" in fields else None,
                delivered=fields["delivered"] == "1" if "delivered" in fields else None,
                error=int(fields["error"]) if "error" in fields else None,
                resumed=fields.get("resumed") == "1",
                reason=fields.get("reason"),
                due_ms=int(fields["due"]) if "due" in fields else None,
            )
        except KeyError as exc:
            raise BadMessage(f"no field {exc.args[0]!r}") from exc
        except ValueError as exc:
            raise BadMessage(cut(str(exc), 120)) from exc
        if not 0 <= event.ts_ms <= LAST_EVENT_MS:
            raise BadMessage(f"time {event.ts_ms} is outside 0..{LAST_EVENT_MS} ms")
        if event.direction not in EVENT_DIRECTIONS:
            shown = cut(repr(event.direction), 60)
            raise BadMessage(f"direction {shown} is neither 'in' nor 'out'")
        return event


# The last millisecond of year 9999: an evidence time past it is not the lab's.
LAST_EVENT_MS = 253402300799999
EVENT_DIRECTIONS = frozenset({"in", "out"})
