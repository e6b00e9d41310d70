"""``mcp-lab trigger``, ``reset``, ``report`` and ``redis-cli``: the commands that
change or read the lab's state and evidence in its Redis (their parsers and
handlers; ``report`` also reads the evidence a stopped ``up`` kept, or a lab's
server when its Redis is out of reach). ``redis-cli`` has a parser of its own,
added after ``probe``'s (``mcp-lab --help`` lists it there), and is run by
:func:`mcp_lab.cli.main.main` before any parsing: its arguments are redis-cli's."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_lab import contract
from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.cli import common
from mcp_lab.evidence import formats

if TYPE_CHECKING:
    from mcp_lab.settings import LabSettings


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``trigger``, ``reset`` and ``report`` to ``mcp-lab``'s subcommands."""
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
        "--delay",
        type=common.seconds(0, False),
        default=0.0,
        help="seconds before applying (default 0)",
    )
    trigger.add_argument(
        "--timeout",
        type=common.seconds(0, True),
        default=10.0,
        help="seconds to wait for the updater to apply it (default 10)",
    )
    trigger.add_argument("--no-wait", action="store_true", help="queue the job and return")
    trigger.add_argument("--json", action="store_true", help=common.JSON_HELP)
    trigger.set_defaults(func=_cmd_trigger)

    reset = sub.add_parser(
        "reset", help="put every state back to version 1 and start a new observation run"
    )
    reset.add_argument("--json", action="store_true", help=common.JSON_HELP)
    reset.set_defaults(func=_cmd_reset)

    rep = sub.add_parser("report", help="how far each client got, from the evidence")
    rep.add_argument(
        "--format",
        choices=formats.names(),
        default=formats.DEFAULT,
        help=formats.help_text(),
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


def add_redis_cli_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``redis-cli`` to ``mcp-lab``'s subcommands (for ``--help``: :func:`cmd_redis_cli`
    runs it)."""
    redis_cli = sub.add_parser(
        "redis-cli",
        help="the bundled redis-cli against the lab's Redis (REDIS_URL, else a running "
        "mcp-lab up's, else 127.0.0.1:6379); arguments go to redis-cli",
    )
    redis_cli.add_argument("args", nargs=argparse.REMAINDER, help="redis-cli arguments")


def cmd_redis_cli(argv: list[str]) -> int:
    """``mcp-lab redis-cli ARGS...``: the bundled redis-cli against the lab's Redis."""
    from mcp_lab.process.embedded_redis import RedisNotFound, redis_binary

    settings = common.lab_redis("redis-cli")
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
    settings = common.lab_redis("trigger")
    if settings is None:
        return 1
    options = trigger.TriggerOptions(
        args.uri, args.session, args.delay, args.timeout, not args.no_wait, args.json
    )
    return common.with_redis(trigger.run(settings, options), settings.redis_url)


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
    from mcp_lab.evidence import build
    from mcp_lab.evidence.labels import lab_labels

    redis = state.connect(settings.redis_url)
    try:
        since_ms = None if args.since is None else _since_ms(args.since)
        made = await build.build(redis, run=args.run, since_ms=since_ms, scenario=args.scenario)
        labels = await lab_labels(redis)  # each session's one name, as on the dashboard
    finally:
        await redis.aclose()
    # Read by whoever runs the lab: the table and the JSON show each session's id too.
    print(formats.get(args.format).render(made, labels, public=False), end="")
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
    settings = common.settings()
    try:
        if args.kept is not None:
            return _report_kept(settings, args, args.kept, "as --kept asks")
        found = common.lab(settings, kept_too=True, say=False)
        if not found.runs and found.kept is not None:
            return _report_kept(settings, args, found.kept, "no lab runs")
        print(found.line(), file=sys.stderr, flush=True)
        if found.redis_out_of_reach:
            from mcp_lab.cli import served_report

            return served_report.run(found, args)
        return common.with_redis(_report(found.server, args), found.redis_url)
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
        return common.with_redis(_report(reading, args), url)


def _cmd_reset(args: argparse.Namespace) -> int:
    settings = common.lab_redis("reset")
    if settings is None:
        return 1
    return common.with_redis(_reset(settings, args.json), settings.redis_url)
