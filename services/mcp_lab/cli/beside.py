"""Where an ``mcp-lab up`` fits beside the labs already running: its runtime file
and its data directory (services/mcp_lab/cli/runtime.py keeps the files).

An ``up`` on the port a live ``up`` serves is refused: that lab runs. Beside live
ups on other ports it is a lab of its own, with its own embedded Redis (on a port of
its own: up.py), its own runtime file (``up.json`` when no live up has it, else
``up-PORT.json``) and its own data directory (the default one when no live lab uses
it, else ``redis-PORT`` beside it); a ``--data-dir`` a live lab's Redis uses is
refused, as two redis-servers on one folder would spoil it. What a killed ``up``
left running is stopped only when it is in this one's way: the runtime file it
takes, or the same server port. Other ports' leftovers are their own up's to clean.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from mcp_lab.cli import runtime
from mcp_lab.process import dirs
from mcp_lab.settings import LabSettings


class CannotStart(Exception):
    """``up`` cannot start; the message says why and what to do (exit 2)."""


def say(lock: threading.Lock, text: str) -> None:
    with lock:
        print(f"lab     | {text}", flush=True)


@dataclass(frozen=True)
class Place:
    """Where an ``up`` keeps its record and its Redis's data, and the labs beside it."""

    port: int  # its server's
    path: Path  # its runtime file
    data_dir: Path | None  # its embedded Redis's data (None: --ephemeral or REDIS_URL)
    # The live ups beside it, the one commands speak of when nothing names another first.
    beside: list[runtime.UpRecord] = field(default_factory=list)

    @property
    def found_by_itself(self) -> bool:
        """Whether commands speak of this lab when nothing names one: alone, or on the
        default port (runtime.running_ups; an up beside it there was refused)."""
        return not self.beside or self.port == runtime.DEFAULT_PORT


def place(
    settings: LabSettings, data_dir: Path | None, ephemeral: bool, lock: threading.Lock
) -> Place:
    """Where an ``up`` with ``settings`` (its server port) fits; refuses (CannotStart)
    when a live up serves that port or uses the ``data_dir`` named. Stops what a
    killed up left running in its way first."""
    found = runtime.records()
    live = [(path, record) for path, record in found if record.up.alive()]
    for _, record in live:
        if record.port == settings.port:
            first = runtime.running_ups()[:1] == [record]
            how = (
                "mcp-lab trigger, report and redis-cli find it by themselves"
                if first
                else f"MCP_TEST_PORT={record.port} makes mcp-lab trigger, report and "
                "redis-cli speak to it"
            )
            raise CannotStart(
                f"mcp-lab up is already running (pid {record.up.pid}): MCP {record.mcp_url}, "
                f"Redis {record.redis_url}. Use that one ({how}), or stop it first; another "
                "lab runs beside it on another port (mcp-lab up --port N)."
            )
    first_taken = any(path == runtime.runtime_file() for path, _ in live)
    path = runtime.runtime_file(settings.port if first_taken else None)
    for old, record in found:
        if (old == path or record.port == settings.port) and not record.up.alive():
            _clean(record, lock)
            runtime.remove_record(record.up.pid, old)
    beside = runtime.running_ups()
    named_redis = "redis_url" in settings.model_fields_set
    data = None if named_redis or ephemeral else _data_dir(settings.port, data_dir)
    own = "runtime file" if named_redis else "Redis, data and runtime file"
    for record in beside:
        say(
            lock,
            f"another lab runs beside this one: mcp-lab up pid {record.up.pid} at "
            f"{record.mcp_url}; this one has its own {own} ({path.name})",
        )
        if named_redis and record.redis_url == settings.redis_url:
            say(
                lock,
                f"the mcp-lab up on port {record.port} (pid {record.up.pid}) uses this "
                "Redis (REDIS_URL) too: the two labs share their state",
            )
    return Place(settings.port, path, data, beside)


def _data_dir(port: int, named: Path | None) -> Path:
    """The data directory of an up on ``port``: ``named`` (--data-dir), else the
    default one, else (a live lab uses that) ``redis-PORT`` beside it."""
    in_use = _data_dirs_in_use()
    wanted = named or dirs.default_data_dir()
    holder = in_use.get(wanted.resolve())
    if holder is None:
        return wanted
    own = dirs.default_data_dir().with_name(f"redis-{port}")
    whose = f"the data directory of the mcp-lab up on port {holder.port} (pid {holder.up.pid})"
    if named is not None:
        raise CannotStart(
            f"--data-dir {named} is {whose}: two Redis servers on one data directory "
            f"would spoil it. Leave --data-dir out (a lab beside another keeps its data in "
            f"{own}), or name another folder."
        )
    holder = in_use.get(own.resolve())
    if holder is not None:
        raise CannotStart(
            f"{own} is the data directory of the mcp-lab up on port {holder.port} "
            f"(pid {holder.up.pid}): start this one with --data-dir DIR (another folder)"
        )
    return own


def _data_dirs_in_use() -> dict[Path, runtime.UpRecord]:
    """The data directories live labs' Redis servers use: live ups', and those a
    killed up's Redis still holds."""
    in_use = {}
    for _, record in runtime.records():
        redis = record.children.get("redis")
        holds = record.up.alive() or (redis is not None and redis.alive())
        if record.data_dir and not record.ephemeral and holds:
            in_use[Path(record.data_dir).resolve()] = record
    return in_use


def _clean(record: runtime.UpRecord, lock: threading.Lock) -> None:
    """Stop what the killed up of ``record`` left running (saying so)."""
    left = {name: p for name, p in record.children.items() if p.alive()}
    if not left:
        say(
            lock,
            f"an earlier mcp-lab up (pid {record.up.pid}) ended without cleaning up; "
            "none of its processes is left",
        )
        return
    names = ", ".join(f"{name} (pid {p.pid})" for name, p in left.items())
    say(
        lock,
        f"an earlier mcp-lab up (pid {record.up.pid}) was killed and left {names} "
        "running; stopping them",
    )
    still = runtime.stop_leftovers(left)
    if still:
        names = ", ".join(f"{name} (pid {p.pid})" for name, p in still.items())
        raise CannotStart(
            f"could not stop what an earlier mcp-lab up left running: {names}; stop them "
            f"yourself (kill {' '.join(str(p.pid) for p in still.values())}) and start again"
        )
    say(lock, "stopped them")
