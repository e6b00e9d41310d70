"""``mcp-lab``: run the lab, or one of its processes, and poke its state by hand."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services import contract
from services.catalog import LAB_CATALOG, REVIEW_STATUS
from services.cli.lifeline import PARENT_PID_ENV, watch_parent
from services.cli.scenarios import add_parser as add_scenarios_parser

if TYPE_CHECKING:
    from services.settings import LabSettings

_WAIT_POLL_SECONDS = 0.1
# What a command imports before it runs (see _import_first): the settings, and the
# modules of the long-running processes.
_FIRST_IMPORTS = {
    "up": ("services.settings", "services.cli.up"),
    "server": ("services.settings", "services.server.run"),
    "updater": ("services.settings", "services.updater"),
}


def _settings() -> LabSettings:
    from services.settings import load_settings  # a bad value: one line, exit code 2

    return load_settings()


def _with_lab_redis(settings: LabSettings) -> LabSettings:
    """``settings`` with the Redis to use (REDIS_URL, else a running ``up``'s, else the
    default), named in one stderr line (not for the children of ``up``)."""
    from services.cli import runtime

    url, source = runtime.find_redis(settings)
    if PARENT_PID_ENV not in os.environ:
        print(f"mcp-lab: Redis at {url} ({source})", file=sys.stderr, flush=True)
    return settings.model_copy(update={"redis_url": url})


def _cmd_up(args: argparse.Namespace) -> int:
    from services.cli.up import UpOptions, run_lab

    data_dir = args.data_dir.expanduser().resolve() if args.data_dir is not None else None
    options = UpOptions(args.port, args.redis_port, data_dir, args.ephemeral, args.scenario)
    return run_lab(_settings(), options)


def _cmd_server(args: argparse.Namespace) -> int:
    from services.server import run

    settings = _with_lab_redis(_settings())
    watch_parent()
    run.main(settings, transport=args.transport)
    return 0


def _cmd_updater(args: argparse.Namespace) -> int:
    from services import updater

    settings = _with_lab_redis(_settings())
    watch_parent()
    return updater.main(settings, burst=args.burst)


def _cmd_redis_cli(argv: list[str]) -> int:
    """``mcp-lab redis-cli ARGS...``: the bundled redis-cli against the lab's Redis."""
    from services.cli.embedded_redis import RedisNotFound, redis_binary

    settings = _with_lab_redis(_settings())
    try:
        binary = redis_binary("redis-cli")
    except RedisNotFound as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 1
    command = [binary, "-u", settings.redis_url, *argv]
    try:
        return subprocess.run(command, check=False).returncode
    except KeyboardInterrupt:
        return 130


async def _trigger(settings: LabSettings, args: argparse.Namespace) -> int:
    import asyncio  # here and below: `up`, which needs neither asyncio nor redis, starts sooner

    from services import state

    redis = state.connect(settings.redis_url)
    try:
        target = args.session or contract.ALL_SUBSCRIBERS
        job = contract.UpdateJob(uri=args.uri, target=target, delay=args.delay)
        await state.ensure_job_group(redis)
        entry_id = await state.enqueue_job(redis, job)
        print(f"queued job {entry_id}: uri={job.uri} target={target} delay={args.delay}s")
        if args.no_wait:
            return 0
        deadline = time.monotonic() + args.delay + args.timeout
        while time.monotonic() < deadline:
            if not await redis.xrange(contract.JOBS_STREAM, entry_id, entry_id):
                print(
                    f"applied: the updater bumped the version and published on "
                    f"{settings.updates_channel}"
                )
                return 0
            await asyncio.sleep(_WAIT_POLL_SECONDS)
        print(
            "still pending: is `mcp-lab updater` running against this Redis? "
            "The job stays queued and is applied when an updater starts.",
            file=sys.stderr,
        )
        return 3
    finally:
        await redis.aclose()


def _cmd_trigger(args: argparse.Namespace) -> int:
    try:
        contract.parse_job(contract.UpdateJob(args.uri, "*", args.delay).fields(), LAB_CATALOG)
    except contract.BadMessage as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2
    if args.uri not in LAB_CATALOG:
        print(
            f"mcp-lab: unknown uri {args.uri!r}; the lab serves {LAB_CATALOG.uris()}",
            file=sys.stderr,
        )
        return 2
    settings = _with_lab_redis(_settings())
    return _with_redis(_trigger(settings, args), settings.redis_url)


async def _reset(settings: LabSettings) -> int:
    # imports the mcp SDK: only where needed, not in healthchecks
    from services import state
    from services.evidence import reader

    redis = state.connect(settings.redis_url)
    try:
        deleted = await state.reset_states(redis)
        run_id = await reader.start_run(redis)
    finally:
        await redis.aclose()
    print(f"reset: {deleted} state(s) deleted; every session reads version 1 again")
    print(f"new observation run {run_id}: `mcp-lab report` shows only what happens from now on")
    return 0


async def _report(settings: LabSettings, args: argparse.Namespace) -> int:
    from services import state
    from services.evidence import build, report

    redis = state.connect(settings.redis_url)
    try:
        since_ms = None if args.since is None else _since_ms(args.since)
        made = await build.build(redis, run=args.run, since_ms=since_ms, scenario=args.scenario)
    finally:
        await redis.aclose()
    if args.format == "json":
        print(json.dumps(report.to_json(made), indent=2))
    elif args.format == "markdown":
        print(report.to_markdown(made), end="")
    else:
        print(report.to_table(made))
    return 0


def _since_ms(text: str) -> int:
    """``--since``: an ISO time (UTC unless it says otherwise) or an age like 90s, 15m, 2h."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
        return int((time.time() - float(text[:-1]) * units[text[-1]]) * 1000)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _cmd_report(args: argparse.Namespace) -> int:
    if args.since is not None:
        try:
            _since_ms(args.since)
        except ValueError:
            print(
                f"mcp-lab: --since {args.since!r} is neither an ISO time nor an age like 15m",
                file=sys.stderr,
            )
            return 2
    settings = _with_lab_redis(_settings())
    try:
        return _with_redis(_report(settings, args), settings.redis_url)
    except LookupError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2


def _cmd_reset(args: argparse.Namespace) -> int:
    settings = _with_lab_redis(_settings())
    return _with_redis(_reset(settings), settings.redis_url)


async def _healthcheck(settings: LabSettings, process: str) -> int:
    if process == "server":
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
        url = f"http://{host}:{settings.port}/healthz"
        import asyncio

        try:
            body = await asyncio.to_thread(_http_get, url)
        except OSError as exc:
            print(f"unhealthy: {url}: {exc}", file=sys.stderr)
            return 1
        print(body)
        return 0
    from services import state

    redis = state.connect(settings.redis_url)
    try:
        alive = await redis.exists(contract.updater_heartbeat_key(settings.updater_consumer))
    finally:
        await redis.aclose()
    if not alive:
        print(
            f"unhealthy: updater {settings.updater_consumer!r} is not reading jobs", file=sys.stderr
        )
        return 1
    print("ok")
    return 0


def _http_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=3) as response:  # raises on 4xx/5xx
        body: str = response.read().decode()
        return body


def _cmd_probe(args: argparse.Namespace) -> int:
    from services.cli import probe

    return probe.main(
        args.url,
        args.uri,
        args.timeout,
        args.protocol,
        args.auth_token,
        args.transport,
        args.scenario,
    )


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    settings = _settings()
    if args.process == "updater":
        settings = _with_lab_redis(settings)
    return _with_redis(_healthcheck(settings, args.process), settings.redis_url)


def _with_redis(coro: Coroutine[Any, Any, int], url: str) -> int:
    import asyncio

    from redis.exceptions import RedisError

    try:
        return asyncio.run(coro)
    except (RedisError, OSError) as exc:
        print(f"mcp-lab: cannot reach Redis at {url}: {exc}", file=sys.stderr)
        return 1


# Commands whose parser needs nothing from services.clients: for these the
# ``clients`` sub-command (its parser imports the scoring and mcp_types, ~0.2 s)
# is left out, which keeps it off the start of ``up`` and of the processes it
# runs. Any other first argument (``clients``, ``--help``, a typo) gets all of them.
_WITHOUT_CLIENTS = frozenset(
    {"up", "server", "updater", "trigger", "reset", "report", "probe", "healthcheck", "scenarios"}
)


def build_parser(with_clients: bool = True) -> argparse.ArgumentParser:
    """The argument parser of ``mcp-lab`` (without the ``clients`` sub-command
    unless ``with_clients``)."""
    parser = argparse.ArgumentParser(
        prog="mcp-lab",
        description="MCP resource-subscription compatibility lab. Settings: MCP_TEST_* and "
        "REDIS_URL environment variables (see README).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run Redis (unless REDIS_URL is set), server and updater")
    up.add_argument(
        "--port", type=int, default=None, help="HTTP port of the server (default: MCP_TEST_PORT)"
    )
    up.add_argument(
        "--redis-port",
        type=int,
        default=None,
        help="port of the embedded Redis (default: 6390, or a free one)",
    )
    keep = up.add_mutually_exclusive_group()
    keep.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the embedded Redis keeps its data "
        "(default: $XDG_DATA_HOME/mcp-lab/redis, i.e. ~/.local/share/mcp-lab/redis)",
    )
    keep.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep the embedded Redis's data in a temporary folder, removed on exit",
    )
    up.add_argument(
        "--scenario",
        default=None,
        help="the scenario to play (default: MCP_TEST_SCENARIO, else single; "
        "mcp-lab scenarios lists them)",
    )
    up.set_defaults(func=_cmd_up)

    server = sub.add_parser("server", help="run the MCP server")
    server.add_argument(
        "--transport",
        choices=["http", "stdio"],
        default="http",
        help="http: Streamable HTTP (both protocol generations) and legacy SSE on one port "
        "(default); stdio: one client on stdin/stdout, logs on stderr",
    )
    server.set_defaults(func=_cmd_server)

    updater = sub.add_parser("updater", help="run the updater")
    updater.add_argument(
        "--burst",
        action="store_true",
        help="apply every job in the stream, each when due, then exit (exit 1 without Redis)",
    )
    updater.set_defaults(func=_cmd_updater)

    trigger = sub.add_parser("trigger", help="update the resource now, through the updater")
    trigger.add_argument("--uri", default=REVIEW_STATUS.uri)
    trigger.add_argument(
        "--session",
        default=None,
        help="only this session's state (default: every subscribed session, "
        "or the shared state in shared scope)",
    )
    trigger.add_argument("--delay", type=float, default=0.0, help="seconds before applying")
    trigger.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the updater to apply it"
    )
    trigger.add_argument("--no-wait", action="store_true", help="queue the job and return")
    trigger.set_defaults(func=_cmd_trigger)

    reset = sub.add_parser(
        "reset", help="put every state back to version 1 and start a new observation run"
    )
    reset.set_defaults(func=_cmd_reset)

    rep = sub.add_parser("report", help="how far each client got, from the evidence")
    rep.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    which = rep.add_mutually_exclusive_group()
    which.add_argument("--run", default=None, help="a run id (default: the current run)")
    which.add_argument(
        "--since", default=None, help="everything since an ISO time or an age (90s, 15m, 2h)"
    )
    rep.add_argument(
        "--scenario",
        default=None,
        help="score as this scenario (default: the one the running lab plays)",
    )
    rep.set_defaults(func=_cmd_report)

    probe = sub.add_parser(
        "probe",
        help="run the ideal subscription flow against any MCP server (exit codes in README)",
    )
    probe.add_argument(
        "--url", required=True, help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8089/mcp"
    )
    probe.add_argument(
        "--uri",
        default=None,
        help="resource to subscribe to (default: the scenario's, test://review/status)",
    )
    probe.add_argument(
        "--scenario",
        default=None,
        help="play this scenario of the lab as its ideal client (default: single; "
        "mcp-lab scenarios lists them)",
    )
    probe.add_argument("--auth-token", default=None, help="sent as 'Authorization: Bearer T'")
    probe.add_argument(
        "--timeout",
        type=float,
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
        choices=["http", "sse"],
        default="http",
        help="http: Streamable HTTP (default); sse: the legacy SSE transport "
        "(--url is then the SSE endpoint, e.g. http://127.0.0.1:8089/sse)",
    )
    probe.set_defaults(func=_cmd_probe)

    redis_cli = sub.add_parser(
        "redis-cli",
        help="the bundled redis-cli against the lab's Redis (REDIS_URL, else a running "
        "mcp-lab up's, else 127.0.0.1:6379); arguments go to redis-cli",
    )
    redis_cli.add_argument("args", nargs=argparse.REMAINDER, help="redis-cli arguments")

    health = sub.add_parser("healthcheck", help="exit 0 if the server or updater is healthy")
    health.add_argument("process", choices=["server", "updater"])
    health.set_defaults(func=_cmd_healthcheck)

    add_scenarios_parser(sub)

    if with_clients:
        from services.clients.cli import add_parser as add_clients_parser

        add_clients_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run ``mcp-lab``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["redis-cli"]:  # every later argument is redis-cli's, options included
        sys.exit(_cmd_redis_cli(argv[1:]))
    with_clients = not argv or argv[0] not in _WITHOUT_CLIENTS
    args = build_parser(with_clients).parse_args(argv)
    _import_first(args.command)
    sys.exit(args.func(args))


def _import_first(command: str) -> None:
    """Import what ``command`` needs before it runs, untracked by the garbage
    collector (:func:`services.heap.import_untracked`)."""
    from services import heap

    heap.import_untracked(_FIRST_IMPORTS.get(command, ("services.settings",)))


if __name__ == "__main__":
    main()
