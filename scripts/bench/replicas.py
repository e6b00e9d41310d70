"""Benchmark phases against the compose scale profile: N server replicas behind HAProxy.

Used by ``scripts/bench --compose-replicas 1,3``. For each N it runs
``docker compose --profile scale up --scale server=N`` under a project of its own
(the balancer on a free loopback port, each replica on an ephemeral one), then the
storm and the fan-out of scripts/bench through the balancer, with Redis read at
its container's address on the project's network (Linux hosts; Redis is not
published). Besides the usual figures it reports how the subscribed sessions
spread over the replicas (the lab's own per-replica session sets) and how many
relays received the fan-out's one publish. The stack is removed at the end.

Images: PYTHON_IMAGE and REDIS_IMAGE as for compose (scripts/build-base-images.sh
on machines without a registry). Everything is bounded: sizes come from the flags,
every wait has a timeout, every docker command a time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

from devtools import compose_projects
from rawmcp import RawClient

from bench.fanout import fanout
from bench.procs import free_port
from bench.storm import storm
from bench.table import pct
from mcp_lab import contract

ADDRESS_FORMAT = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"


class ComposeStack:
    """The scale profile of ``code``'s docker-compose.yml under a project of its own."""

    def __init__(self, code: Path) -> None:
        self.code = code
        compose_projects.remove_leftovers()
        self.project = compose_projects.project_name("bench")
        self.port = free_port()
        self.built = False

    def _run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
        command = ["docker", "compose", "-p", self.project, "--profile", "scale", *args]
        result = subprocess.run(
            command,
            cwd=self.code,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
        return result.stdout

    def up(self, replicas: int, settings: dict[str, str]) -> str:
        """Start the stack afresh (an empty Redis: the volume goes with the last
        stack, as Redis cannot be flushed under running replicas without deleting
        their heartbeats) with ``replicas`` servers and ``settings`` (MCP_TEST_*
        without the prefix); the Redis URL to reach it from here."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
        env.update(
            MCP_LAB_SERVER_PORT="0",
            DOCKER_BUILDKIT="0",
            MCP_TEST_LOG_LEVEL="WARNING",
        )
        env.update({f"MCP_TEST_{k.upper()}": v for k, v in settings.items()})
        for attempt in range(3):
            if self.built or attempt:
                self.down(images=False)
            build = [] if self.built else ["--build"]
            env["MCP_LAB_HTTP_PORT"] = str(self.port)
            try:
                self._run("up", "-d", *build, "--wait", "--scale", f"server={replicas}", env=env)
                break
            except RuntimeError as exc:
                # A port picked free (the balancer's, or the engine's ephemeral one for a
                # replica) was taken meanwhile, e.g. by one of the bench's own client
                # sockets: the engine does not pick again, so start over.
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                print("  compose up: a port was taken meanwhile; starting again")
                self.port = free_port()
        self.built = True
        redis_id = self._run("ps", "-q", "redis").strip()
        address = subprocess.run(
            ["docker", "inspect", "-f", ADDRESS_FORMAT, redis_id],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        return f"redis://{address}:6379/0"

    def down(self, images: bool = True) -> None:
        self._run("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout=180)
        if not images:
            return
        compose_projects.remove_images(self.project)


def spread_recorder(
    redis_url: str, into: dict[str, int]
) -> Callable[[list[RawClient]], Awaitable[None]]:
    """A hook for ``bench.storm.storm``/``bench.fanout.fanout``: counts, per lab
    replica, the subscribed clients it holds (``contract.replica_sessions_key``) into
    ``into``."""

    async def record(clients: list[RawClient]) -> None:
        from redis.asyncio import Redis

        ids = {c.session_id for c in clients if c.session_id}
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            async for key in redis.scan_iter(match=contract.REPLICA_SESSIONS_PATTERN):
                members = {str(m) for m in await redis.smembers(key)}
                replica = contract.replica_of_sessions_key(str(key))
                into[replica] = len(members & ids)
        finally:
            await redis.aclose()

    return record


def _spread_text(spread: dict[str, int]) -> str:
    counts = sorted(spread.values(), reverse=True)
    return f"{sum(1 for c in counts if c)} ({'/'.join(map(str, counts))})"


def run(replica_counts: list[int], args: argparse.Namespace, extra: dict[str, str]) -> None:
    """Storm and fan-out through the balancer for each replica count; prints a table."""
    code = args.code.resolve()
    stack = ComposeStack(code)
    columns: dict[int, dict[str, str]] = {}
    try:
        for n in replica_counts:
            columns[n] = _one(stack, n, args, extra)
    finally:
        stack.down()
    measures = list(next(iter(columns.values())))
    print()
    print("| measure | " + " | ".join(f"{n} replica{'s' * (n > 1)}" for n in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for measure in measures:
        print(f"| {measure} | " + " | ".join(columns[n][measure] for n in columns) + " |")


def _one(
    stack: ComposeStack, replicas: int, args: argparse.Namespace, extra: dict[str, str]
) -> dict[str, str]:
    rows: dict[str, str] = {}
    load = os.getloadavg()[0]
    url = stack.up(replicas, {"update_delay_seconds": "0", "state_scope": "session", **extra})
    spread: dict[str, int] = {}
    result = asyncio.run(
        storm(
            stack.port,
            args.storm,
            redis_url=url,
            concurrency=args.concurrency,
            timeout=args.timeout,
            on_subscribed=spread_recorder(url, spread),
        )
    )
    print(f"{replicas} replica(s), load {load:.1f}: {result.summary()}")
    n = args.storm
    rows[f"storm {n}: replicas holding sessions (sessions each)"] = _spread_text(spread)
    rows[f"storm {n}: refused (setup failed + subscribe refused)"] = str(
        sum(result.refused.values()) + sum(result.setup_failed.values())
    )
    rows[f"storm {n}: missing notifications"] = str(result.missing_notifications)
    rows[f"storm {n}: evidence records missing (of expected)"] = (
        f"{result.evidence_missing} of {result.evidence_expected}{result.evidence_notes()}"
    )
    rows[f"storm {n}: subscribers left after the sessions ended"] = str(result.subscribers_left)
    rows[f"storm {n}: setup sessions/s"] = f"{result.sessions_per_second:.0f}"

    url = stack.up(replicas, {"update_delay_seconds": "3600", "state_scope": "shared", **extra})
    spread = {}
    receivers: list[int] = []
    latencies = asyncio.run(
        fanout(
            stack.port,
            args.fanout,
            url,
            args.concurrency,
            args.timeout,
            on_subscribed=spread_recorder(url, spread),
            receivers=receivers,
        )
    )
    f = args.fanout
    rows[f"fan-out {f}: replicas holding sessions (sessions each)"] = _spread_text(spread)
    rows[f"fan-out {f}: relays that received the one publish"] = ",".join(map(str, receivers))
    rows[f"fan-out {f}: notifications received"] = f"{len(latencies)} of {f}"
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        rows[f"fan-out {f}: {name} publish to notification"] = f"{pct(latencies, q):.0f} ms"
    rows["load average (1 min) at the start"] = f"{load:.1f}"
    return rows


def parse_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or any(c < 1 for c in counts):
        raise argparse.ArgumentTypeError(f"replica counts must be positive integers: {text!r}")
    return counts
