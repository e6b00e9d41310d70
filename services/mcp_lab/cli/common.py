"""What several ``mcp-lab`` commands share: the settings, where the lab's Redis and
server are (each named in one stderr line), running a command's coroutine (with or
without Redis), the ``--json`` help and the argparse type of a number of seconds.
The command modules (process_commands.py, state_commands.py, probe_command.py,
look_commands.py) import it; it imports nothing heavy before it is called."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from mcp_lab.process.lifeline import PARENT_PID_ENV

if TYPE_CHECKING:
    from mcp_lab.cli.where import Where
    from mcp_lab.settings import LabSettings

JSON_HELP = "print JSON instead of text"


def settings() -> LabSettings:
    from mcp_lab.settings import load_settings  # a bad value: one line, exit code 2

    return load_settings()


def with_lab_redis(settings: LabSettings) -> LabSettings:
    """``settings`` with the Redis to use (REDIS_URL, else a running ``up``'s, else the
    default), named in one stderr line (not for the children of ``up``)."""
    from mcp_lab.cli import runtime

    url, source = runtime.find_redis(settings)
    if PARENT_PID_ENV not in os.environ:
        print(f"mcp-lab: Redis at {url} ({source})", file=sys.stderr, flush=True)
    return settings.model_copy(update={"redis_url": url})


def lab(settings: LabSettings, kept_too: bool = False, say: bool = True) -> Where:
    """The lab a command speaks of (services/mcp_lab/cli/where.py), named in one stderr line."""
    from mcp_lab.cli import where

    found = where.find(settings, kept_too=kept_too)
    if say:
        print(found.line(), file=sys.stderr, flush=True)
    return found


def lab_redis(command: str) -> LabSettings | None:
    """The settings of the lab's Redis for ``command``, None (said why) when that lab's
    server answers and its Redis does not."""
    found = lab(settings())
    if found.redis_out_of_reach:
        print(f"mcp-lab: {found.out_of_reach(command)}", file=sys.stderr)
        return None
    return found.server


def with_lab_server(settings: LabSettings) -> LabSettings:
    """``settings`` with the server to talk to (MCP_TEST_HOST/PORT, else a running
    ``up``'s, else the default), named in one stderr line."""
    from mcp_lab.cli import runtime

    found, source = runtime.find_server(settings)
    print(f"mcp-lab: server at {found.base_url} ({source})", file=sys.stderr, flush=True)
    return found


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    import asyncio

    return asyncio.run(coro)


def with_redis(coro: Coroutine[Any, Any, int], url: str) -> int:
    import asyncio

    from redis.exceptions import RedisError

    try:
        return asyncio.run(coro)
    except (RedisError, OSError) as exc:
        print(f"mcp-lab: cannot reach Redis at {url}: {exc}", file=sys.stderr)
        return 1


def seconds(minimum: float, strictly: bool) -> Any:
    """An argparse type: a number of seconds above (or at least) ``minimum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
        if value < minimum or (strictly and value == minimum):
            bound = "above" if strictly else "at least"
            raise argparse.ArgumentTypeError(f"{text} s: must be {bound} {minimum:g}")
        return value

    return parse
