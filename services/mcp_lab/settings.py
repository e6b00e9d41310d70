"""Settings of the lab, read from the environment (``MCP_TEST_*`` and ``REDIS_URL``).

Both processes (server and updater) and the CLI read the same settings, so one
``.env`` or one set of variables configures the whole lab. ``load_settings``
reads them; a bad value stops the process with one line naming the variable
(exit code 2), never a traceback.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from mcp_lab import contract
from mcp_lab.scenarios import registry

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BAD_SETTINGS_EXIT_CODE = 2
_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


def _url_path(value: str) -> str:
    if not value.startswith("/") or any(c.isspace() for c in value) or "?" in value:
        raise ValueError("must be a URL path starting with '/' (for example /mcp)")
    return value


def _optional_url_path(value: str) -> str:
    return value and _url_path(value)


def _bind_host(value: str) -> str:
    if not value or any(c.isspace() or c in "/@?#" for c in value):
        raise ValueError("must be a host name or IP address (for example 127.0.0.1 or 0.0.0.0)")
    return value


def _host_list(value: str) -> str:
    for item in (part.strip() for part in value.split(",")):
        if any(c.isspace() or c in "/@?#" for c in item):
            raise ValueError(f"{item!r} is not a host name (comma-separated names, no scheme)")
    return value


def _origin_list(value: str) -> str:
    for item in (part.strip() for part in value.split(",")):
        if not item or item == "*":
            continue
        parts = urlsplit(item) if "://" in item else None
        if parts is None or not parts.scheme or not parts.netloc or parts.path not in ("", "/"):
            raise ValueError(f"{item!r} is not an origin like https://ui.example (comma-separated)")
    return value


def _token(value: str | None) -> str | None:
    if not value:
        return None  # empty means no token (compose passes '' when it is unset)
    if not all("!" <= c <= "~" for c in value):
        raise ValueError("must be printable ASCII without spaces (it travels in a header)")
    return value


def _one_line(value: str) -> str:
    if any(c in value for c in "\r\n"):
        raise ValueError("must be one line")
    return value


_MEMORY = re.compile(r"^[0-9]+(b|k|kb|m|mb|g|gb)?$", re.IGNORECASE)


def _memory(value: str) -> str:
    if not _MEMORY.match(value.strip()):
        raise ValueError(
            "must be an amount of memory as Redis reads it (for example 1gb, 512mb, 0)"
        )
    return value.strip().lower()


def _log_level(value: Any) -> Any:
    if isinstance(value, str) and value.strip().upper() in _LOG_LEVELS:
        return value.strip().upper()
    raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")


def _scenario(value: str) -> str:
    if value not in registry.names():
        raise ValueError(f"must be one of {', '.join(registry.names())} (mcp-lab scenarios)")
    return value


def _redis_url(value: str) -> str:
    if value == DEFAULT_REDIS_URL:  # valid; and `mcp-lab up` need not import redis-py (~0.1 s)
        return value
    from redis.connection import parse_url

    try:
        parse_url(value)
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {exc}") from None
    return value


UrlPath = Annotated[str, AfterValidator(_url_path)]
OptionalUrlPath = Annotated[str, AfterValidator(_optional_url_path)]
BindHost = Annotated[str, AfterValidator(_bind_host)]
HostList = Annotated[str, AfterValidator(_host_list)]
OriginList = Annotated[str, AfterValidator(_origin_list)]
Token = Annotated[str | None, AfterValidator(_token)]
OneLine = Annotated[str, AfterValidator(_one_line)]
LogLevel = Annotated[str, BeforeValidator(_log_level)]
Memory = Annotated[str, AfterValidator(_memory)]
RedisUrl = Annotated[str, AfterValidator(_redis_url)]
ScenarioName = Annotated[str, AfterValidator(_scenario)]


def env_name(field: str) -> str:
    """The environment variable that sets ``field`` (``port`` -> ``MCP_TEST_PORT``)."""
    alias = LabSettings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        names = [name for name in alias.choices if isinstance(name, str)]
        return next((name for name in names if name in os.environ), names[0])
    return f"{LabSettings.model_config.get('env_prefix', '')}{field}".upper()


def _field_of(loc: str) -> str:
    """The field an error is about (pydantic names an aliased field by its alias)."""
    for field, info in LabSettings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and loc in alias.choices:
            return field
    return loc


def describe(error: ValidationError) -> str:
    """One line naming each bad variable, its value (and ``.env`` when it came from
    there) and what is wrong with it."""
    problems = []
    for item in error.errors():
        field = _field_of(str(item["loc"][0]) if item["loc"] else "")
        name = env_name(field) if field in LabSettings.model_fields else field.upper()
        message = str(item["msg"]).removeprefix("Value error, ")
        source = "" if name in os.environ else " (from .env)"  # defaults are never bad
        problems.append(f"{name}={_shown(name, item.get('input'))}{source}: {message}")
    return "bad setting " + "; ".join(problems)


def _shown(name: str, value: object) -> str:
    """The bad value for the error line, without secrets (a token, a URL's password)."""
    if "TOKEN" in name and value:
        return "<hidden>"
    if isinstance(value, str) and "@" in value and "://" in value:
        scheme, _, rest = value.partition("://")
        value = f"{scheme}://<hidden>@{rest.rpartition('@')[2]}"
    return repr(value)


def load_settings(prog: str = "mcp-lab") -> LabSettings:
    """The settings from the environment; a bad value exits with one line and code 2."""
    try:
        return LabSettings()
    except ValidationError as exc:
        print(f"{prog}: {describe(exc)}", file=sys.stderr)
        sys.exit(BAD_SETTINGS_EXIT_CODE)


class LabSettings(BaseSettings):
    """Every knob of the lab. Field ``foo`` is set by ``MCP_TEST_FOO``."""

    model_config = SettingsConfigDict(env_prefix="MCP_TEST_", env_file=".env", extra="ignore")

    host: BindHost = Field("127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(8089, ge=1, le=65535, description="HTTP port of the server.")
    path: UrlPath = Field("/mcp", description="Path of the Streamable HTTP endpoint.")
    sse_path: OptionalUrlPath = Field(
        "/sse", description="Path of the legacy SSE transport ('' turns it off)."
    )

    host_origin_protection: bool = Field(
        True, description="Check Host (421) and Origin (403) on every HTTP request."
    )
    allowed_hosts: HostList = Field(
        "", description="Extra Host names allowed, comma-separated (loopback names always are)."
    )
    allowed_origins: OriginList = Field(
        "", description="Extra browser Origins allowed, comma-separated (e.g. https://x.example)."
    )
    auth_token: Token = Field(
        None, description="If set, HTTP requests need 'Authorization: Bearer <token>'."
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Largest request body accepted (chunked or not)."
    )
    initial_status: OneLine = Field(
        "pending", min_length=1, description="Status word at version 1."
    )
    updated_status: OneLine = Field(
        "reviewed", min_length=1, description="Status word after an update."
    )
    state_scope: Literal["session", "shared"] = Field(
        "session", description="'session': one state per MCP session; 'shared': one for all."
    )
    update_delay_seconds: float = Field(
        5.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds between a subscribe and the update the updater makes.",
    )
    max_subscriptions_per_session: int = Field(
        100,
        ge=1,
        description="Most resources one session may be subscribed to at once; a subscribe "
        "past it gets an error (the template scenario has a resource per id).",
    )
    scenario: ScenarioName = Field(
        "single",
        description="The scenario the lab plays (resources, updates, checkpoints; "
        "`mcp-lab scenarios` lists them). Server and updater must play the same one.",
    )
    updates_channel: str = Field(
        "mcp:resources:updated", min_length=1, description="Redis pub/sub channel of updates."
    )
    send_list_changed: bool = Field(
        False, description="Also send notifications/resources/list_changed after each update."
    )
    enable_tool: bool = Field(False, description="Add the get_review_status tool.")
    log_level: LogLevel = Field("INFO", description="Log level of server and updater.")
    state_ttl_seconds: int = Field(
        86400, ge=60, description="Lifetime in Redis of a session's state after its last update."
    )
    events_max: int = Field(
        100_000, ge=1000, description="Events kept in the evidence record (older ones drop out)."
    )
    events_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=64 * 1024,
        description="Redis memory the evidence record may take (older events drop out past it).",
    )
    resumable: bool = Field(
        True, description="Keep each session's SSE events in Redis for Last-Event-ID resumption."
    )
    resume_max_events: int = Field(
        1000, ge=10, description="SSE events kept per session for resumption (older drop out)."
    )
    resume_ttl_seconds: int = Field(
        3600, ge=60, description="Lifetime in Redis of a session's kept events after the last one."
    )
    retry_ms: int = Field(
        1000, ge=0, description="SSE 'retry' sent to clients: when to reconnect a dropped stream."
    )
    updater_consumer: str = Field(
        "updater", min_length=1, description="Consumer name of this updater in the job group."
    )
    strict_methods: bool = Field(
        False,
        description=(
            "Refuse tools/list and prompts/list with -32601 when not advertised "
            "(by default they get empty lists)."
        ),
    )
    session_idle_seconds: float = Field(
        1800.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "A Streamable HTTP session with no request in flight and no open GET stream "
            "for this long is closed by the server (later requests get 404)."
        ),
    )
    max_sessions: int = Field(
        10_000,
        ge=1,
        description="Most Streamable HTTP sessions open at once; a new one past it gets 503.",
    )
    max_requests_at_once: int = Field(
        16,
        ge=1,
        le=100_000,
        description=(
            "Requests of open sessions the server handles at once; the others wait their "
            "turn, so that under a burst notifications still go out when due."
        ),
    )
    # Timings: the defaults suit a real deployment; the tests shorten them.
    updater_heartbeat_seconds: int = Field(
        contract.UPDATER_HEARTBEAT_SECONDS,
        ge=1,
        description="Lifetime of an updater's heartbeat; its jobs are taken over once it expires.",
    )
    take_over_every_seconds: float = Field(
        5.0, gt=0, description="How often an updater looks for jobs of updaters without heartbeat."
    )
    replica_heartbeat_seconds: int = Field(
        contract.REPLICA_HEARTBEAT_SECONDS,
        ge=1,
        description="Lifetime of a server replica's heartbeat (refreshed every third of it).",
    )
    resume_block_ms: int = Field(
        2000, ge=10, le=8000, description="Longest wait of one read of a resumed stream's events."
    )
    dashboard_block_ms: int = Field(
        5000, ge=10, le=8000, description="Longest wait of the dashboard stream for new events."
    )
    dashboard_max_streams: int = Field(
        100, ge=1, description="Most dashboard streams (/api/stream) open at once; 503 past it."
    )
    dashboard_max_events: int = Field(
        20_000,
        ge=100,
        description="Events a dashboard report reads at most (the newest of the run).",
    )
    reconnect_backoff_max_seconds: float = Field(
        5.0, gt=0, description="Longest pause between reconnects of relay and updater to Redis."
    )
    head_timeout_seconds: float = Field(
        10.0,
        gt=0,
        allow_inf_nan=False,
        description="A connection that has not sent a whole request head this long is closed.",
    )
    body_timeout_seconds: float = Field(
        10.0,
        gt=0,
        allow_inf_nan=False,
        description="A request whose body has not all arrived this long after its head gets 408.",
    )
    keep_alive_seconds: int = Field(
        5, ge=1, description="An idle keep-alive connection between requests is closed after this."
    )
    max_connections: int = Field(
        0,
        ge=0,
        description=(
            "Most HTTP connections open at once (0: as many as the open-file limit leaves "
            "room for); never more than that."
        ),
    )
    redis_max_connections: int = Field(
        100, ge=1, description="Redis connections the server opens at most (one shared pool)."
    )
    redis_maxmemory: Memory = Field(
        "1gb",
        description=(
            "maxmemory of the Redis the lab starts (embedded, compose); writes fail past it, "
            "nothing is evicted. 0: no limit."
        ),
    )
    redis_client_buffer_limit: Memory = Field(
        "64mb",
        description=(
            "Hard output-buffer limit of each normal client of the Redis the lab starts "
            "(a client past it is disconnected). 0: no limit."
        ),
    )
    redis_pool_timeout_seconds: float = Field(
        20.0,
        gt=0,
        description="How long a Redis command waits for a free connection before it fails.",
    )
    write_queue_max: int = Field(
        10_000,
        ge=100,
        description="Evidence and resume writes queued for the batch writer (callers wait beyond).",
    )

    redis_url: RedisUrl = Field(
        DEFAULT_REDIS_URL,
        validation_alias=AliasChoices("REDIS_URL", "MCP_TEST_REDIS_URL"),
        description="Redis the lab uses (REDIS_URL).",
    )
    post_responses: Literal["auto", "sse", "json"] = Field(
        "auto",
        description=(
            "How the server answers a POST on Streamable HTTP: auto (one JSON body for a "
            "request whose handling sends the client nothing before its answer, when the "
            "client accepts application/json; an SSE stream for the others), sse (every "
            "POST a stream, primed and resumable for 2025-11-25 clients) or json (every "
            "POST one JSON body: no stream, no resume record)."
        ),
    )

    @property
    def base_url(self) -> str:
        """http://host:port of the server (loopback when it binds every interface; an
        IPv6 address in brackets, ``http://[::1]:8089``)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def mcp_url(self) -> str:
        """The URL a Streamable HTTP client is pointed at."""
        return f"{self.base_url}{self.path}"

    @property
    def sse_url(self) -> str:
        """The URL a legacy SSE client is pointed at."""
        return f"{self.base_url}{self.sse_path}"
