"""``mcp-lab probe``: the ideal subscription flow against any MCP server (its parser and
handler). Without ``--url`` it probes the running lab, and plays the scenario that lab
plays (read from its Redis) unless another is asked for; the probe itself is
:mod:`mcp_lab.runners.probe`, imported when the command runs."""

from __future__ import annotations

import argparse
import sys

from mcp_lab import contract
from mcp_lab.cli import common
from mcp_lab.protocol import Transport


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``probe`` to ``mcp-lab``'s subcommands."""
    probe = sub.add_parser(
        "probe",
        help="run the ideal subscription flow against any MCP server (exit codes in docs/usage.md)",
    )
    probe.add_argument(
        "--url",
        default=None,
        help="the server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8089/mcp (default: "
        "the running mcp-lab up's, or its /sse endpoint with --transport sse)",
    )
    probe.add_argument(
        "--uri",
        default=None,
        help="resource to subscribe to (default: the scenario's, test://review/status)",
    )
    probe.add_argument(
        "--scenario",
        default=None,
        help="play this scenario of the lab as its ideal client (default: the one the "
        "running mcp-lab up plays, else single; mcp-lab scenarios lists them)",
    )
    probe.add_argument("--auth-token", default=None, help="sent as 'Authorization: Bearer T'")
    probe.add_argument(
        "--timeout",
        type=common.seconds(0, True),
        default=30.0,
        help="seconds to wait for the notification (default 30)",
    )
    probe.add_argument(
        "--protocol",
        choices=["legacy", "modern", "auto"],
        default="auto",
        help="legacy: initialize + resources/subscribe; modern: 2026-07-28 "
        "server/discover + subscriptions/listen; auto: modern, falling back",
    )
    probe.add_argument(
        "--transport",
        choices=[t.short for t in (Transport.STREAMABLE_HTTP, Transport.SSE)],
        default=Transport.STREAMABLE_HTTP.short,
        help="http: Streamable HTTP (default); sse: the legacy SSE transport "
        "(--url is then the SSE endpoint, e.g. http://127.0.0.1:8089/sse)",
    )
    probe.set_defaults(func=_cmd_probe)


def _cmd_probe(args: argparse.Namespace) -> int:
    from mcp_lab.runners import probe

    url = args.url
    if url is None:
        found = common.lab(common.settings())
        server = found.server
        if args.transport == Transport.SSE.short and not server.sse_path:
            print("mcp-lab: that lab serves no legacy SSE endpoint; pass --url", file=sys.stderr)
            return 2
        url = server.sse_url if args.transport == Transport.SSE.short else server.mcp_url
        if found.redis_answers:
            args.scenario = _lab_scenario_for_probe(found.redis_url, args.scenario)
    return probe.main(
        url,
        args.uri,
        args.timeout,
        args.protocol,
        args.auth_token,
        args.transport,
        args.scenario,
    )


def _lab_scenario_for_probe(url: str, asked: str | None) -> str | None:
    """The scenario the probe plays against the lab: the one it plays (read from its
    Redis at ``url``) unless another is asked for, which is then said to differ."""
    try:
        played = _with_redis_quietly(url)
    except OSError:
        return asked
    if played is None or asked == played:
        return asked or played
    if asked is None:
        print(f"mcp-lab: the lab plays the scenario {played}: probing it", file=sys.stderr)
        return played
    print(
        f"mcp-lab: the lab plays {played}, not {asked}: the probe expects what {asked} "
        f"does and may wait in vain (mcp-lab up --scenario {asked})",
        file=sys.stderr,
    )
    return asked


def _with_redis_quietly(url: str) -> str | None:
    """The scenario name the lab at Redis ``url`` recorded, if any (one short GET)."""
    import asyncio

    from redis.exceptions import RedisError

    from mcp_lab import state

    async def read() -> str | None:
        redis = state.connect(url)
        try:
            raw = await state.read_raw(redis, "GET", contract.SCENARIO_KEY)
        finally:
            await redis.aclose()
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None

    try:
        return asyncio.run(read())
    except RedisError as exc:
        raise OSError(str(exc)) from exc
