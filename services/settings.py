"""Settings of the lab, read from the environment (``MCP_TEST_*`` and ``REDIS_URL``).

Both processes (server and updater) and the CLI read the same settings, so one
``.env`` or one set of variables configures the whole lab.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class LabSettings(BaseSettings):
    """Every knob of the lab. Field ``foo`` is set by ``MCP_TEST_FOO``."""

    model_config = SettingsConfigDict(env_prefix="MCP_TEST_", env_file=".env", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(8089, ge=1, le=65535, description="HTTP port of the server.")
    path: str = Field("/mcp", description="Path of the Streamable HTTP endpoint.")
    sse_path: str = Field("/sse", description="Path of the legacy SSE transport ('' turns it off).")

    host_origin_protection: bool = Field(
        True, description="Check Host (421) and Origin (403) on every HTTP request."
    )
    allowed_hosts: str = Field(
        "", description="Extra Host names allowed, comma-separated (loopback names always are)."
    )
    allowed_origins: str = Field(
        "", description="Extra browser Origins allowed, comma-separated (e.g. https://x.example)."
    )
    auth_token: str | None = Field(
        None, description="If set, HTTP requests need 'Authorization: Bearer <token>'."
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Largest request body accepted (chunked or not)."
    )
    initial_status: str = Field("pending", min_length=1, description="Status word at version 1.")
    updated_status: str = Field(
        "reviewed", min_length=1, description="Status word after an update."
    )
    state_scope: Literal["session", "shared"] = Field(
        "session", description="'session': one state per MCP session; 'shared': one for all."
    )
    update_delay_seconds: float = Field(
        5.0, ge=0, description="Seconds between a subscribe and the update the updater makes."
    )
    updates_channel: str = Field(
        "mcp:resources:updated", min_length=1, description="Redis pub/sub channel of updates."
    )
    send_list_changed: bool = Field(
        False, description="Also send notifications/resources/list_changed after each update."
    )
    enable_tool: bool = Field(False, description="Add the get_review_status tool.")
    log_level: str = Field("INFO", description="Log level of server and updater.")
    state_ttl_seconds: int = Field(
        86400, ge=60, description="Lifetime in Redis of a session's state after its last update."
    )
    events_max: int = Field(
        100_000, ge=1000, description="Events kept in the evidence record (older ones drop out)."
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
    redis_max_connections: int = Field(
        100, ge=1, description="Redis connections the server opens at most (one shared pool)."
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

    redis_url: str = Field(
        DEFAULT_REDIS_URL,
        validation_alias=AliasChoices("REDIS_URL", "MCP_TEST_REDIS_URL"),
        description="Redis the lab uses (REDIS_URL).",
    )

    @property
    def base_url(self) -> str:
        """http://host:port of the server (loopback when it binds every interface)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    @property
    def mcp_url(self) -> str:
        """The URL a Streamable HTTP client is pointed at."""
        return f"{self.base_url}{self.path}"

    @property
    def sse_url(self) -> str:
        """The URL a legacy SSE client is pointed at."""
        return f"{self.base_url}{self.sse_path}"
