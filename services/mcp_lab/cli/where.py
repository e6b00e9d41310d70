"""Which lab a command speaks of: one answer for every command that talks to a lab.

``status``, ``report``, ``trigger``, ``reset``, ``redis-cli``, ``connect`` and ``probe``
(without ``--url``) all ask :func:`find`, which takes the lab as a whole, its server
and its Redis together, in order:

1. what the environment or ``.env`` names (``REDIS_URL``; ``MCP_TEST_HOST``,
   ``MCP_TEST_PORT``, ``MCP_TEST_PATH``, ``MCP_TEST_SSE_PATH``) when it is not a
   running ``mcp-lab up``: then the running ``up`` is another lab, and the parts
   not named are the defaults;
2. a running ``mcp-lab up`` (its runtime file: its server and its Redis; named
   parts that agree with it change nothing). With several running (one per server
   port), the one the named parts agree with (``MCP_TEST_PORT=8099``: the one on
   8099), else the one on the default port if it runs, else the oldest; the others
   are other labs, each said with the ``MCP_TEST_PORT`` that speaks to it;
3. the defaults: ``http://127.0.0.1:8089/mcp`` and ``redis://127.0.0.1:6379/0``.

It then asks whether that lab's server and Redis answer. A lab whose server answers
while its Redis does not (a ``docker compose`` lab publishes its server's port and keeps
its Redis inside its network) is still that lab: ``report`` reads that server's own
report, ``trigger`` and ``reset`` say they cannot reach its Redis; nothing falls back
to another lab unasked. Only when no lab answers at all does ``report`` read the
evidence a stopped ``up`` kept. Each command names the lab in one line on stderr
(:meth:`Where.line`), and the other lab when there is one, with how to pick it.

``server``, ``updater`` and ``healthcheck`` are parts of a lab, not views of one: they
take their Redis and server from :func:`runtime.find_redis` and
:func:`runtime.find_server`.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from mcp_lab.cli import runtime
from mcp_lab.cli.healthcheck import http_get
from mcp_lab.process.dirs import default_data_dir
from mcp_lab.settings import LabSettings

# How long a part of the lab has to answer before it counts as not answering.
_SERVER_SECONDS = 1.0
_REDIS_SECONDS = 0.5
_DOCKER_SECONDS = 3.0
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "0.0.0.0", "::", "::1"})


@dataclass(frozen=True)
class Where:
    """The lab a command speaks of: its server and Redis, how each was found, whether
    each answers, and the other labs there are (each with how to pick it)."""

    server: LabSettings  # the settings, with the lab's server and its redis_url
    server_source: str
    redis_source: str
    record: runtime.UpRecord | None  # the running up, when the lab is that one
    server_answers: bool = False
    redis_answers: bool = False
    compose: str | None = None  # the docker compose project publishing the server's port
    kept: Path | None = None  # what a stopped up kept, when it is another lab here
    others: list[str] = field(default_factory=list)
    other_up: runtime.UpRecord | None = None  # the running up, when it is another lab

    @property
    def redis_url(self) -> str:
        return self.server.redis_url

    @property
    def runs(self) -> bool:
        """Whether any part of this lab answers."""
        return self.server_answers or self.redis_answers

    @property
    def redis_out_of_reach(self) -> bool:
        """Its server answers, its Redis does not (from here)."""
        return self.server_answers and not self.redis_answers

    def line(self) -> str:
        """The one line that names the lab (and the other one, if any)."""
        redis, server = self.redis_url, self.server.mcp_url
        if self.redis_source == self.server_source:
            head = f"Redis at {redis}, server at {server} ({self.server_source})"
        else:
            head = (
                f"Redis at {redis} ({self.redis_source}), server at {server} ({self.server_source})"
            )
        notes = []
        if self.compose:
            notes.append(f"docker compose project {self.compose}")
        if self.redis_out_of_reach:
            notes.append("its Redis does not answer from here")
        elif not self.runs:
            notes.append("neither answers")
        elif not self.server_answers:
            notes.append("its server does not answer")
        return "mcp-lab: " + "; ".join([head, *notes, *self.others])

    def out_of_reach(self, command: str) -> str:
        """What to do when ``command`` needs this lab's Redis and cannot reach it."""
        instead = (
            f"Run `docker compose -p {self.compose} exec server mcp-lab {command}`"
            if self.compose
            else "Run it where that Redis is reachable (inside the lab's network)"
        )
        if not self.compose and not self.redis_source.startswith("the default"):
            # The Redis was named here (REDIS_URL): it is that one that does not answer.
            return (
                f"cannot reach Redis at {self.redis_url} ({self.redis_source} names it), "
                f"while the lab at {self.server.mcp_url} answers: start that Redis, or set "
                "REDIS_URL to the lab's own Redis (or unset it)."
            )
        return (
            f"cannot reach Redis at {self.redis_url}, and the lab at {self.server.mcp_url} "
            f"answers: its Redis is out of reach from here (a docker compose lab keeps it "
            f"inside its network). {instead}, or set REDIS_URL to that lab's Redis."
        )


def redis_answers(url: str, timeout: float = _REDIS_SECONDS) -> bool:
    """Whether a Redis answers at ``url`` (PING; an error reply, such as NOAUTH, is an
    answer too; over TLS a connection is)."""
    parts = urlsplit(url)
    try:
        if parts.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(parts.path)
            except OSError:
                sock.close()
                raise
        else:
            address = (parts.hostname or "127.0.0.1", parts.port or 6379)
            sock = socket.create_connection(address, timeout=timeout)
        with sock:
            if parts.scheme == "rediss":
                return True
            sock.sendall(b"PING\r\n")
            return sock.recv(1)[:1] in (b"+", b"-")
    except (OSError, ValueError):
        return False


def server_answers(base: str, timeout: float = _SERVER_SECONDS) -> bool:
    """Whether an HTTP server answers ``{base}/healthz`` (any status)."""
    try:
        http_get(f"{base}/healthz", timeout=timeout)
    except (OSError, http.client.HTTPException, ValueError):
        return False
    return True


def compose_project(port: int) -> str | None:
    """The docker compose project whose container publishes ``port``, if docker says."""
    docker = shutil.which("docker")
    if docker is None:
        return None
    label = '{{.Label "com.docker.compose.project"}}'
    try:
        found = subprocess.run(
            [docker, "ps", "--filter", f"publish={port}", "--format", label],
            capture_output=True,
            text=True,
            timeout=_DOCKER_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = sorted({line.strip() for line in found.stdout.splitlines() if line.strip()})
    return names[0] if found.returncode == 0 and names else None


def _named(fields: list[str]) -> str:
    """How the environment names ``fields`` of the settings."""
    names = ["REDIS_URL" if f == "redis_url" else f"MCP_TEST_{f.upper()}" for f in fields]
    in_env = any(n in os.environ for n in names) or (
        "redis_url" in fields and "MCP_TEST_REDIS_URL" in os.environ
    )
    return ", ".join(names) + ("" if in_env else " in .env")


def _same_server(a: str, b: str) -> bool:
    one, two = urlsplit(a), urlsplit(b)
    hosts = {one.hostname or "", two.hostname or ""}
    same_host = len(hosts) == 1 or hosts <= _LOOPBACK
    return same_host and one.port == two.port and one.path == two.path


def _differ(settings: LabSettings, named: list[str], mcp_url: str) -> list[str]:
    """Those of the ``named`` server settings that are not the server at ``mcp_url``."""
    parts = urlsplit(mcp_url)
    differ = []
    if "host" in named and not {settings.host, parts.hostname or ""} <= _LOOPBACK:
        differ += [] if settings.host == parts.hostname else ["host"]
    if "port" in named and settings.port != parts.port:
        differ.append("port")
    if "path" in named and settings.path != parts.path:
        differ.append("path")
    return differ


def _up_settings(settings: LabSettings, record: runtime.UpRecord) -> LabSettings:
    update = runtime.up_urls(settings, record)
    if "sse_path" in settings.model_fields_set:
        update["sse_path"] = settings.sse_path
    return settings.model_copy(update={**update, "redis_url": record.redis_url})


def _clash(settings: LabSettings, named_server: list[str], record: runtime.UpRecord) -> list[str]:
    """The settings named that are not the running up of ``record``."""
    named_redis = "redis_url" in settings.model_fields_set
    clash = ["redis_url"] if named_redis and settings.redis_url != record.redis_url else []
    return clash + _differ(settings, named_server, record.mcp_url)


def _beside(settings: LabSettings, record: runtime.UpRecord) -> str:
    """Another running up, and how to speak to it."""
    how = f"MCP_TEST_PORT={record.port}"
    if "redis_url" in settings.model_fields_set and settings.redis_url != record.redis_url:
        how += " with REDIS_URL unset"
    return (
        f"another mcp-lab up, pid {record.up.pid} (server {record.mcp_url}, "
        f"Redis {record.redis_url}): {how} speaks to it"
    )


def find(settings: LabSettings, *, kept_too: bool = False) -> Where:
    """The lab to speak of (see the module's doc). ``kept_too``: also look for what a
    stopped ``up`` kept, when the lab found is not a running ``up``."""
    ups = runtime.running_ups()
    named_server = [f for f in runtime.SERVER_FIELDS if f in settings.model_fields_set]
    named_redis = "redis_url" in settings.model_fields_set
    for record in ups:
        if not _clash(settings, named_server, record):
            up = f"the running mcp-lab up, pid {record.up.pid}"
            found = Where(_up_settings(settings, record), up, up, record)
            return _with_others(settings, found, [r for r in ups if r is not record])
    if ups:
        record = ups[0]  # the one unsetting what is named speaks to
        names = _named(_clash(settings, named_server, record)).removesuffix(" in .env")
        other = (
            f"not the running mcp-lab up, pid {record.up.pid} (server {record.mcp_url}, "
            f"Redis {record.redis_url}): unset {names} (environment and .env) to speak to it"
        )
        if _same_server(settings.mcp_url, record.mcp_url):
            other += f"; the server at {record.mcp_url} is that up's, on its own Redis"
        default = "the default"
        found = Where(
            settings,
            _named(named_server) if named_server else default,
            _named(["redis_url"]) if named_redis else default,
            None,
            others=[other, *(_beside(settings, r) for r in ups[1:])],
            other_up=record,
        )
        return _answering(found, kept_too=False)
    default = "the default: no mcp-lab up runs"
    found = Where(
        settings,
        _named(named_server) if named_server else default,
        _named(["redis_url"]) if named_redis else default,
        None,
    )
    return _answering(found, kept_too=kept_too and not named_redis)


def _answering(found: Where, *, kept_too: bool) -> Where:
    """``found`` (not a running up) with which of its parts answer, the compose project
    behind its server, and the kept data of a stopped up when that is another lab."""
    server_up = server_answers(found.server.base_url)
    redis_up = redis_answers(found.redis_url)
    compose = compose_project(found.server.port) if server_up else None
    kept = _kept(found.server) if kept_too else None
    others = list(found.others)
    if kept is not None and (server_up or redis_up):
        read = "mcp-lab report --kept" + ("" if kept == default_data_dir() else f" {kept}")
        others.append(f"the evidence a stopped mcp-lab up kept in {kept}: {read}")
    return Where(
        found.server,
        found.server_source,
        found.redis_source,
        None,
        server_up,
        redis_up,
        compose,
        kept,
        others,
        found.other_up,
    )


def _kept(settings: LabSettings) -> Path | None:
    """What a stopped up kept: with MCP_TEST_PORT, in the data directory of a lab that
    ran on that port beside another (``redis-PORT``), if it kept any; else in the
    default one."""
    from mcp_lab.cli.kept import kept_data

    if "port" in settings.model_fields_set:
        beside = kept_data(default_data_dir().with_name(f"redis-{settings.port}"))
        if beside is not None:
            return beside
    return kept_data()


def _with_others(settings: LabSettings, found: Where, beside: list[runtime.UpRecord]) -> Where:
    """``found`` (a running up) with the ups running ``beside`` it, and another server
    answering where ``settings`` point (the default URL, or the one named), if one does
    there and no up is there (a docker compose lab, a server started by hand)."""
    others = [_beside(settings, record) for record in beside]
    ups = [found.server.mcp_url, *(record.mcp_url for record in beside)]
    if not any(_same_server(settings.mcp_url, url) for url in ups) and server_answers(
        settings.base_url
    ):
        project = compose_project(settings.port)
        what = f"docker compose project {project}" if project else "not this up's"
        others.append(
            f"another lab answers at {settings.mcp_url} ({what}): "
            f"MCP_TEST_PORT={settings.port} speaks to it"
        )
    # The up runs its server and Redis: they are taken to answer (status asks them).
    return Where(
        found.server,
        found.server_source,
        found.redis_source,
        found.record,
        server_answers=True,
        redis_answers=True,
        others=others,
    )
