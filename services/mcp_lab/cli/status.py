"""``mcp-lab status``: is a lab running, where, and who is connected to it now.

It speaks of the lab every command speaks of (services/mcp_lab/cli/where.py: the running
``mcp-lab up``'s runtime file gives its URLs, Redis, data directory and processes),
asks the server (``/healthz``; ``/api/report`` for the
current run and its clients, scored by the server) and Redis (the updater's
heartbeat, who is subscribed). Every part that does not answer is said, never a
traceback; the exit code is 0 when the server answers healthy, else 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from mcp_lab import contract, untrusted
from mcp_lab.catalog import LAB_CATALOG
from mcp_lab.cli.healthcheck import http_get
from mcp_lab.cli.where import Where

RUNNING, NOT_RUNNING = 0, 1
# Redis's whole part of the answer, connecting included (a host that drops packets
# would otherwise hold the connect for state.CONNECT_TIMEOUT_SECONDS).
_REDIS_TIMEOUT_SECONDS = 3
_SHOWN_SESSIONS = 6


def _get_json(url: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON body of ``url``, or None and why not."""
    try:
        status, body = http_get(url)
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc  # urllib's URLError wraps the cause
        return None, f"does not answer ({getattr(reason, 'strerror', None) or reason})"
    try:
        data = json.loads(body)
    except ValueError:
        return None, f"HTTP {status}, not JSON"
    return (data, None) if isinstance(data, dict) else (None, f"HTTP {status}, not an object")


async def _redis_facts(url: str, consumer: str) -> dict[str, Any]:
    from redis.exceptions import RedisError

    from mcp_lab import state, state_jobs

    redis = state.connect(url, socket_timeout=_REDIS_TIMEOUT_SECONDS, reconnect=False)
    try:
        async with asyncio.timeout(_REDIS_TIMEOUT_SECONDS):
            alive = bool(await redis.exists(contract.updater_heartbeat_key(consumer)))
            subscribed: dict[str, list[str]] = {}
            for uri in LAB_CATALOG.uris():
                job = contract.UpdateJob(uri, contract.ALL_SUBSCRIBERS)
                subscribed[uri] = await state_jobs.job_targets(redis, job, state_scope="session")
    except TimeoutError:
        return {"reachable": False, "error": f"no answer within {_REDIS_TIMEOUT_SECONDS} s"}
    except (RedisError, OSError) as exc:
        return {"reachable": False, "error": redis_error_text(exc)}
    finally:
        await redis.aclose()
    return {"reachable": True, "updater_alive": alive, "subscribed": subscribed}


# redis-py's words for a failed connect: "Error 111 connecting to HOST:PORT. <why>."
_CONNECT_ERROR = re.compile(
    r"Error (-?\d+) connecting to (?:\S+:\d+|/\S*?)\.\s*(.*?)\.?$", re.DOTALL
)
_ERROR_CHARS = 120  # of any other error's text, on the Redis line


def redis_error_text(exc: BaseException) -> str:
    """Why Redis did not answer, short enough for the status line that already names
    its URL: ``connection refused`` for redis-py's "Error 111 connecting to HOST:PORT.
    Connect call failed (...)", the resolver's words for a name that does not resolve,
    and any other error's first line, cut."""
    text = str(exc).strip() or type(exc).__name__
    found = _CONNECT_ERROR.match(text)
    if found:
        code, why = int(found.group(1)), found.group(2)
        return (os.strerror(code) if code > 0 else why).lower() or f"error {code}"
    return untrusted.shown(text.splitlines()[0], _ERROR_CHARS)


async def _server_facts(
    base: str,
) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None, str | None]:
    """The server's ``/healthz`` and, when it answers, ``/api/report`` (each bounded
    by the healthcheck's HTTP timeout), with why not."""
    healthz, health_error = await asyncio.to_thread(_get_json, f"{base}/healthz")
    report, report_error = (None, health_error)
    if healthz is not None:
        report, report_error = await asyncio.to_thread(_get_json, f"{base}/api/report")
    return healthz, health_error, report, report_error


async def gather(where: Where, consumer: str) -> dict[str, Any]:
    """Everything ``status`` says, as plain data (what ``--json`` prints). The server
    and Redis are asked at once: one that does not answer costs its own bound, once."""
    base = where.server.base_url
    (healthz, health_error, report, report_error), facts = await asyncio.gather(
        _server_facts(base), _redis_facts(where.redis_url, consumer)
    )
    record = where.record
    return {
        "up": None
        if record is None
        else {
            "pid": record.up.pid,
            "processes": {name: proc.pid for name, proc in record.children.items()},
        },
        "other_up": None if where.other_up is None else where.other_up.up.pid,
        "mcp_url": where.server.mcp_url,
        "sse_url": where.server.sse_url if where.server.sse_path else None,
        "dashboard_url": f"{base}/",
        "server_source": where.server_source,
        "server": {"answering": True, "healthz": healthz}
        if healthz is not None
        else {"answering": False, "error": health_error},
        "redis": {"url": where.redis_url, "source": where.redis_source, **facts},
        "data_dir": None if record is None else record.data_dir,
        "ephemeral": False if record is None else record.ephemeral,
        "compose_project": where.compose,
        "kept": None if where.kept is None else str(where.kept),
        "other_labs": where.others,
        "updater": {"consumer": consumer, "alive": facts.get("updater_alive")},
        "run": None if report is None else {**report["run"], "window": report.get("window")},
        "report_error": report_error if report is None else None,
        "clients": []
        if report is None
        else [
            {
                "client": c["client"],
                "version": c["version"],
                "level": c["level"],
                "level_name": c["level_name"],
                "sessions": len(c["sessions"]),
            }
            for c in report.get("clients", [])
        ],
    }


def _sessions(ids: list[str]) -> str:
    shown = ", ".join(ids[:_SHOWN_SESSIONS])
    more = len(ids) - _SHOWN_SESSIONS
    return f"{shown} and {more} more" if more > 0 else shown


def _server_line(server: dict[str, Any]) -> str:
    if not server["answering"]:
        return str(server["error"])
    health = server["healthz"]
    state = "healthy" if health.get("status") == "ok" else "degraded"
    return (
        f"{state}: Redis {health.get('redis')}, relay {health.get('relay')}, "
        f"{health.get('sessions')} session(s) held ({health.get('http_sessions')} "
        f"Streamable HTTP of at most {health.get('max_sessions')})"
    )


def to_text(data: dict[str, Any]) -> str:
    """The terminal rendering of :func:`gather`'s data."""
    up = data["up"]
    if up:
        children = ", ".join(f"{name} {pid}" for name, pid in up["processes"].items())
        running = f"running, pid {up['pid']} ({children})"
    elif data["other_up"]:
        running = f"running, pid {data['other_up']}, but not the lab shown here (Other lab)"
    else:
        running = "not running for this user"
    lines = [
        f"mcp-lab up   {running}",
        f"MCP server   {data['mcp_url']}   ({data['server_source']})",
    ]
    if data["sse_url"]:
        lines.append(f"             {data['sse_url']}   (legacy SSE)")
    lines += [
        f"Dashboard    {data['dashboard_url']}",
        f"Server       {_server_line(data['server'])}",
    ]
    redis = data["redis"]
    reach = "" if redis["reachable"] else f"; does not answer ({redis['error']})"
    lines.append(f"Redis        {redis['url']}   ({redis['source']}){reach}")
    if data["data_dir"]:
        kept = "throwaway (--ephemeral)" if data["ephemeral"] else "kept"
        lines.append(f"Data         {data['data_dir']}   ({kept})")
    alive = data["updater"]["alive"]
    if alive is not None:
        consumer = data["updater"]["consumer"]
        lines.append(
            f"Updater      {'reading jobs' if alive else 'no heartbeat: not running'}"
            f" (consumer {consumer!r})"
        )
    if redis["reachable"]:
        for uri, ids in redis["subscribed"].items():
            who = f"{len(ids)} session(s): {_sessions(ids)}" if ids else "nobody"
            lines.append(f"Subscribed   {uri}: {who}")
    if data["compose_project"]:
        lines.append(f"Compose      project {data['compose_project']}")
    for other in data["other_labs"]:
        lines.append(f"Other lab    {other}")
    if data["run"] is None:
        lines.append(f"Run          unknown: the server {data['report_error']}")
        if up is None:
            lines += ["", "No lab answers: start one with `python3 scripts/dev.py up`."]
            if data["kept"] and not redis["reachable"]:
                lines.append(
                    f"The evidence a stopped mcp-lab up kept is in {data['kept']}: "
                    "`mcp-lab report` reads it."
                )
        return "\n".join(lines)
    lines.append(f"Run          {data['run']['window']}")
    if not data["clients"]:
        lines.append("Clients      none in this run yet")
    for i, client in enumerate(data["clients"]):
        head = "Clients      " if i == 0 else "             "
        lines.append(
            f"{head}{client['client']} {client['version']}: level {client['level']} "
            f"({client['level_name']}), {client['sessions']} session(s)"
        )
    return "\n".join(lines)


async def run(where: Where, as_json: bool) -> int:
    data = await gather(where, where.server.updater_consumer)
    print(json.dumps(data, indent=2) if as_json else to_text(data))
    healthy = data["server"]["answering"] and data["server"]["healthz"].get("status") == "ok"
    return RUNNING if healthy else NOT_RUNNING
