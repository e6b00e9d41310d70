"""``mcp-lab healthcheck server|updater``: exit 0 when that process is healthy.

The server: its ``/healthz`` answers 200 (the server of the running ``mcp-lab up``,
unless ``MCP_TEST_HOST``/``MCP_TEST_PORT`` name another). The updater: its heartbeat
is in Redis. The container healthchecks run it too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from mcp_lab import contract
from mcp_lab.settings import LabSettings

HEALTHY, UNHEALTHY = 0, 1
_HTTP_TIMEOUT_SECONDS = 3


def http_get(url: str, timeout: float = _HTTP_TIMEOUT_SECONDS) -> tuple[int, str]:
    """The status and body of a GET of ``url`` (4xx and 5xx included); raises OSError
    when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _said(as_json: bool, healthy: bool, text: str, data: dict[str, Any]) -> int:
    if as_json:
        print(json.dumps({"healthy": healthy, **data}, indent=2))
    elif healthy:
        print(text)
    else:
        print(f"unhealthy: {text}", file=sys.stderr)
    return HEALTHY if healthy else UNHEALTHY


async def server(settings: LabSettings, as_json: bool) -> int:
    url = f"{settings.base_url}/healthz"
    data: dict[str, Any] = {"process": "server", "url": url}
    try:
        status, body = await asyncio.to_thread(http_get, url)
    except OSError as exc:
        return _said(as_json, False, f"{url}: {exc}", {**data, "error": str(exc)})
    try:
        data["healthz"] = json.loads(body)
    except ValueError:
        data["body"] = body
    text = body if status == 200 else f"{url}: HTTP {status} {body}"
    return _said(as_json, status == 200, text, data)


async def updater(settings: LabSettings, as_json: bool) -> int:
    from mcp_lab import state

    consumer = settings.updater_consumer
    redis = state.connect(settings.redis_url)
    try:
        alive = bool(await redis.exists(contract.updater_heartbeat_key(consumer)))
    finally:
        await redis.aclose()
    data = {"process": "updater", "consumer": consumer, "redis": settings.redis_url}
    text = "ok" if alive else f"updater {consumer!r} is not reading jobs"
    return _said(as_json, alive, text, data)
