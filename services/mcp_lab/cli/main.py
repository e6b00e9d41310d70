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

from mcp_lab import contract
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.cli.scenarios import add_parser as add_scenarios_parser
from mcp_lab.process.lifeline import PARENT_PID_ENV, watch_parent

if TYPE_CHECKING:
    from mcp_lab.cli.where import Where
    from mcp_lab.settings import LabSettings

# What a command imports before it runs (see _import_first): the settings, and the
# modules of the long-running processes.
_FIRST_IMPORTS = {
    "up": ("mcp_lab.settings", "mcp_lab.cli.up"),
    "server": ("mcp_lab.settings", "mcp_lab.server.run"),
    "updater": ("mcp_lab.settings", "mcp_lab.updater"),
}


def _settings() -> LabSettings:
    from mcp_lab.settings import load_settings  # a bad value: one line, exit code 2

    return load_settings()


def _with_lab_redis(settings: LabSettings) -> LabSettings:
    """``settings`` with the Redis to use (REDIS_URL, else a running ``up``'s, else the
    default), named in one stderr line (not for the children of ``up``)."""
    from mcp_lab.cli import runtime

    url, source = runtime.find_redis(settings)
    if PARENT_PID_ENV not in os.environ:
        print(f"mcp-lab: Redis at {url} ({source})", file=sys.stderr, flush=True)
    return settings.model_copy(update={"redis_url": url})


def _lab(settings: LabSettings, kept_too: bool = False, say: bool = True) -> Where:
    """The lab a command speaks of (services/mcp_lab/cli/where.py), named in one stderr line."""
    from mcp_lab.cli import where

    found = where.find(settings, kept_too=kept_too)
    if say:
        print(found.line(), file=sys.stderr, flush=True)
    return found


def _lab_redis(command: str) -> LabSettings | None:
    """The settings of the lab's Redis for ``command``, None (said why) when that lab's
    server answers and its Redis does not."""
    found = _lab(_settings())
    if found.redis_out_of_reach:
        print(f"mcp-lab: {found.out_of_reach(command)}", file=sys.stderr)
        return None
    return found.server


def _cmd_up(args: argparse.Namespace) -> int:
    from mcp_lab.cli.up import UpOptions, run_lab

    data_dir = args.data_dir.expanduser().resolve() if args.data_dir is not None else None
    options = UpOptions(args.port, args.redis_port, data_dir, args.ephemeral, args.scenario)
    return run_lab(_settings(), options)


def _cmd_server(args: argparse.Namespace) -> int:
    from mcp_lab.server import run

    settings = _with_lab_redis(_settings())
    watch_parent()
    run.main(settings, transport=args.transport, matrix=_matrix_history)
    return 0


def _matrix_history() -> dict[str, Any]:
    """The dashboard's ``/api/matrix``: the runners' history, imported when first asked
    for (the server starts without the runners)."""
    from mcp_lab.runners import matrix_history

    return matrix_history.matrix()


def _cmd_updater(args: argparse.Namespace) -> int:
    from mcp_lab import updater

    settings = _with_lab_redis(_settings())
    watch_parent()
    return updater.main(settings, burst=args.burst)


def _cmd_redis_cli(argv: list[str]) -> int:
    """``mcp-lab redis-cli ARGS...``: the bundled redis-cli against the lab's Redis."""
    from mcp_lab.process.embedded_redis import RedisNotFound, redis_binary

    settings = _lab_redis("redis-cli")
    if settings is None:
        return 1
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


def _cmd_trigger(args: argparse.Namespace) -> int:
    from mcp_lab.cli import trigger

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
    settings = _lab_redis("trigger")
    if settings is None:
        return 1
    options = trigger.TriggerOptions(
        args.uri, args.session, args.delay, args.timeout, not args.no_wait, args.json
    )
    return _with_redis(trigger.run(settings, options), settings.redis_url)


async def _reset(settings: LabSettings, as_json: bool) -> int:
    from mcp_lab import state
    from mcp_lab.evidence import reader

    redis = state.connect(settings.redis_url)
    try:
        deleted = await state.reset_states(redis)
        run_id = await reader.start_run(redis)
    finally:
        await redis.aclose()
    if as_json:
        print(json.dumps({"states_deleted": deleted, "run": run_id}, indent=2))
        return 0
    print(f"reset: {deleted} state(s) deleted; every session reads version 1 again")
    print(f"new observation run {run_id}: `mcp-lab report` shows only what happens from now on")
    return 0


async def _report(settings: LabSettings, args: argparse.Namespace) -> int:
    from mcp_lab import state
    from mcp_lab.evidence import build, report
    from mcp_lab.evidence.labels import lab_labels

    redis = state.connect(settings.redis_url)
    try:
        since_ms = None if args.since is None else _since_ms(args.since)
        made = await build.build(redis, run=args.run, since_ms=since_ms, scenario=args.scenario)
        labels = await lab_labels(redis)  # each session's one name, as on the dashboard
    finally:
        await redis.aclose()
    if args.format == "json":
        print(json.dumps(report.to_json(made, labels), indent=2))
    elif args.format == "markdown":
        print(report.to_markdown(made, labels), end="")
    elif args.format == "html":
        from mcp_lab.evidence.html_report import to_html

        print(to_html(made, labels), end="")
    else:
        print(report.to_table(made, labels))
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
    if args.json:
        args.format = "json"
    settings = _settings()
    try:
        if args.kept is not None:
            return _report_kept(settings, args, args.kept, "as --kept asks")
        found = _lab(settings, kept_too=True, say=False)
        if not found.runs and found.kept is not None:
            return _report_kept(settings, args, found.kept, "no lab runs")
        print(found.line(), file=sys.stderr, flush=True)
        if found.redis_out_of_reach:
            from mcp_lab.cli import served_report

            return served_report.run(found, args)
        return _with_redis(_report(found.server, args), found.redis_url)
    except LookupError as exc:
        print(f"mcp-lab: {exc}", file=sys.stderr)
        return 2


def _report_kept(
    settings: LabSettings, args: argparse.Namespace, kept: str | Path, why: str
) -> int:
    from mcp_lab.cli.kept import kept_data, kept_redis
    from mcp_lab.process.dirs import default_data_dir

    asked = Path(kept).expanduser() if kept != "" else default_data_dir()
    data_dir = kept_data(asked)
    if data_dir is None:
        print(f"mcp-lab: no evidence kept in {asked}", file=sys.stderr)
        return 2
    print(
        f"mcp-lab: {why}; reading the evidence kept in {data_dir} (a copy, read only)",
        file=sys.stderr,
        flush=True,
    )
    with kept_redis(data_dir) as url:
        reading = settings.model_copy(update={"redis_url": url})
        return _with_redis(_report(reading, args), url)


def _cmd_reset(args: argparse.Namespace) -> int:
    settings = _lab_redis("reset")
    if settings is None:
        return 1
    return _with_redis(_reset(settings, args.json), settings.redis_url)


def _with_lab_server(settings: LabSettings) -> LabSettings:
    """``settings`` with the server to talk to (MCP_TEST_HOST/PORT, else a running
    ``up``'s, else the default), named in one stderr line."""
    from mcp_lab.cli import runtime

    found, source = runtime.find_server(settings)
    print(f"mcp-lab: server at {found.base_url} ({source})", file=sys.stderr, flush=True)
    return found


def _cmd_probe(args: argparse.Namespace) -> int:
    from mcp_lab.runners import probe

    url = args.url
    if url is None:
        found = _lab(_settings())
        server = found.server
        if args.transport == "sse" and not server.sse_path:
            print("mcp-lab: that lab serves no legacy SSE endpoint; pass --url", file=sys.stderr)
            return 2
        url = server.sse_url if args.transport == "sse" else server.mcp_url
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


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    from mcp_lab.cli import healthcheck

    settings = _settings()
    if args.process == "server":
        return _run_async(healthcheck.server(_with_lab_server(settings), args.json))
    settings = _with_lab_redis(settings)
    return _with_redis(healthcheck.updater(settings, args.json), settings.redis_url)


def _cmd_status(args: argparse.Namespace) -> int:
    from mcp_lab.cli import status

    return _run_async(status.run(_lab(_settings(), kept_too=True), args.json))


def _cmd_connect(args: argparse.Namespace) -> int:
    from mcp_lab.cli import connect

    return connect.main(args.client, _lab(_settings()).server.mcp_url, args.json)


def _run_async(coro: Coroutine[Any, Any, int]) -> int:
    import asyncio

    return asyncio.run(coro)


def _with_redis(coro: Coroutine[Any, Any, int], url: str) -> int:
    import asyncio

    from redis.exceptions import RedisError

    try:
        return asyncio.run(coro)
    except (RedisError, OSError) as exc:
        print(f"mcp-lab: cannot reach Redis at {url}: {exc}", file=sys.stderr)
        return 1


# Commands whose parser needs nothing from mcp_lab.runners.clients: for these the
# ``clients`` sub-command (its parser imports the scoring and mcp_types, ~0.2 s)
# is left out, which keeps it off the start of ``up`` and of the processes it
# runs. Any other first argument (``clients``, ``--help``, a typo) gets all of them.
_WITHOUT_CLIENTS = frozenset(
    {
        "up",
        "server",
        "updater",
        "trigger",
        "reset",
        "report",
        "probe",
        "healthcheck",
        "status",
        "connect",
        "scenarios",
        "--version",
    }
)
_JSON_HELP = "print JSON instead of text"


def _seconds(minimum: float, strictly: bool) -> Any:
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"mcp-lab {version('mcp-subscribe-lab')}"
    except PackageNotFoundError:
        return "mcp-lab (not installed: no version)"


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked: importlib.metadata reads the installed
    distributions, ~15 ms that every command (``up`` before it spawns the server)
    would pay for nothing."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(_version())
        parser.exit()


def build_parser(with_clients: bool = True) -> argparse.ArgumentParser:
    """The argument parser of ``mcp-lab`` (without the ``clients`` sub-command
    unless ``with_clients``)."""
    parser = argparse.ArgumentParser(
        prog="mcp-lab",
        description="MCP resource-subscription compatibility lab. Settings: MCP_TEST_* and "
        "REDIS_URL environment variables (see docs/usage.md).",
    )
    parser.add_argument("--version", action=_VersionAction)
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

    trigger = sub.add_parser(
        "trigger",
        help="update the resource now, through the updater, and say what changed "
        "(exit 4: nobody subscribed and each session has its own state: no job queued)",
    )
    trigger.add_argument(
        "--uri",
        default=REVIEW_STATUS.uri,
        help=f"the resource to update (default {REVIEW_STATUS.uri})",
    )
    trigger.add_argument(
        "--session",
        default=None,
        help="only this session's state, subscribed or not (default: every subscribed "
        "session, or the shared state in shared scope)",
    )
    trigger.add_argument(
        "--delay", type=_seconds(0, False), default=0.0, help="seconds before applying (default 0)"
    )
    trigger.add_argument(
        "--timeout",
        type=_seconds(0, True),
        default=10.0,
        help="seconds to wait for the updater to apply it (default 10)",
    )
    trigger.add_argument("--no-wait", action="store_true", help="queue the job and return")
    trigger.add_argument("--json", action="store_true", help=_JSON_HELP)
    trigger.set_defaults(func=_cmd_trigger)

    reset = sub.add_parser(
        "reset", help="put every state back to version 1 and start a new observation run"
    )
    reset.add_argument("--json", action="store_true", help=_JSON_HELP)
    reset.set_defaults(func=_cmd_reset)

    rep = sub.add_parser("report", help="how far each client got, from the evidence")
    rep.add_argument(
        "--format",
        choices=["table", "markdown", "json", "html"],
        default="table",
        help="table: one row per client (default); markdown: compatibility notes, one block "
        "per client, with a mermaid sequence diagram; json: everything, with each session's "
        "timeline; html: one self-contained page with a picture of each session",
    )
    rep.add_argument("--json", action="store_true", help="the same as --format json")
    which = rep.add_mutually_exclusive_group()
    which.add_argument("--run", default=None, help="a run id (default: the current run)")
    which.add_argument(
        "--since", default=None, help="everything since an ISO time or an age (90s, 15m, 2h)"
    )
    rep.add_argument(
        "--scenario",
        default=None,
        help="score as this scenario (default: the one the run was played under)",
    )
    rep.add_argument(
        "--kept",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="read the evidence a stopped mcp-lab up kept (in DIR, default its data "
        "directory), even while another lab runs",
    )
    rep.set_defaults(func=_cmd_report)

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
        type=_seconds(0, True),
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
    health.add_argument(
        "process",
        choices=["server", "updater"],
        help="server: its /healthz answers (the running mcp-lab up's server, unless "
        "MCP_TEST_HOST/MCP_TEST_PORT name another); updater: its heartbeat is in Redis",
    )
    health.add_argument("--json", action="store_true", help=_JSON_HELP)
    health.set_defaults(func=_cmd_healthcheck)

    status = sub.add_parser(
        "status",
        help="is a lab running: its URLs, Redis, data, the run, sessions and clients now "
        "(exit 1 when no server answers)",
    )
    status.add_argument("--json", action="store_true", help=_JSON_HELP)
    status.set_defaults(func=_cmd_status)

    connect = sub.add_parser(
        "connect", help="the configuration that points a client at the running lab"
    )
    from mcp_lab.cli.connect import CLIENTS as CONNECTABLE  # a few ms: no SDK, no Redis

    connect.add_argument("client", choices=list(CONNECTABLE), help="the client to configure")
    connect.add_argument("--json", action="store_true", help=_JSON_HELP)
    connect.set_defaults(func=_cmd_connect)

    add_scenarios_parser(sub)

    if with_clients:
        from mcp_lab.cli.check import add_parser as add_check_parser
        from mcp_lab.runners.bridges.cli import add_parser as add_bridges_parser
        from mcp_lab.runners.clients.cli import add_parser as add_clients_parser

        add_clients_parser(sub)
        add_bridges_parser(sub)
        add_check_parser(sub)
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
    collector (:func:`mcp_lab.process.heap.import_untracked`)."""
    from mcp_lab.process import heap

    heap.import_untracked(_FIRST_IMPORTS.get(command, ("mcp_lab.settings",)))


if __name__ == "__main__":
    main()
