"""``mcp-lab status``'s Redis line: why Redis does not answer, in a few words (the URL is
on the line already), from redis-py's own errors for a real failed connect."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from mcp_lab.cli.status import redis_error_text
from mcp_lab.process.embedded_redis import free_port


async def _error_of(url: str) -> RedisError:
    client = aioredis.Redis.from_url(url, socket_timeout=3)
    try:
        await client.ping()
    except RedisError as exc:
        return exc
    finally:
        await client.aclose()
    raise AssertionError(f"{url} answered")


@pytest.mark.anyio
async def test_a_refused_connect_is_said_in_two_words() -> None:
    exc = await _error_of(f"redis://127.0.0.1:{free_port()}/0")
    assert "connecting to" in str(exc)  # redis-py's long form, which the line used to carry
    assert redis_error_text(exc) == "connection refused"


@pytest.mark.anyio
async def test_a_missing_socket_is_said_by_its_reason(tmp_path: Path) -> None:
    exc = await _error_of(f"unix://{tmp_path / 'no.sock'}")
    assert redis_error_text(exc) == "no such file or directory"


def test_any_other_error_is_its_first_line_cut_and_escaped() -> None:
    said = redis_error_text(RedisError("x" * 1_000 + "\x1b[2J\nsecond line"))
    assert said.startswith("x" * 120 + "...(") and "\x1b" not in said and "\n" not in said
