"""A running lab for a client's own test suite: the ``mcp_lab`` fixture's object
(:mod:`mcp_lab.runners.clients.pytest_plugin`).

It is the clients runner's lab (:func:`mcp_lab.runners.lab.running_lab`: an embedded
Redis, the server and the updater on free loopback ports, ending with the test
process), held by an event loop of its own in a thread, so a plain test function can
use it: its MCP URL, the command line of its stdio server, an update on demand, a
reset, and the verdict of a client's sessions since the last reset.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mcp_lab import contract, protocol, state
from mcp_lab.evidence import reader
from mcp_lab.evidence.levels import LEVEL_NAMES, ClientScore
from mcp_lab.runners.clients.matrix import CHECKPOINT_BOXES
from mcp_lab.runners.lab import RunLab, running_lab
from mcp_lab.runners.lab_side import stdio_server
from mcp_lab.scenarios import registry

T = TypeVar("T")
_CALL_SECONDS = 60.0


@dataclass(frozen=True)
class LabVerdict:
    """How far one client got since the lab's last reset, from the lab's evidence."""

    client: str  # its clientInfo name
    version: str
    level: int  # 0-6 (7, the update in a model's context, is not the lab's to see)
    level_name: str
    notes: list[str] = field(default_factory=list)
    # connected, listed, read, subscribed, notified, re_read: reached or not
    checklist: dict[str, bool] = field(default_factory=dict)
    # The scenario's own checkpoints, by key: their answers ("3/3" updates notified in
    # ``repeated``, "yes"...), so a test can hold a client to them (mcp-lab scenarios).
    checks: dict[str, str] = field(default_factory=dict)


class FixtureLab:
    """A lab running for tests (see the module docstring); use :func:`start`."""

    def __init__(self, workdir: Path, scenario: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-lab",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self._context: AbstractAsyncContextManager[RunLab] = running_lab(
            workdir, scenario=registry.get(scenario)
        )
        self._lab = self._call(self._context.__aenter__())
        side = workdir / "stdio"
        side.mkdir(exist_ok=True)
        self.url: str = self._lab.mcp_url
        self.stdio_command: list[str] = stdio_server(self._lab, side)
        self.scenario = scenario

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(_CALL_SECONDS)

    def trigger(self, uri: str | None = None) -> None:
        """Update ``uri`` (the scenario's resource by default) for every subscribed
        session now, and wait until the updater has published it."""

        job = contract.UpdateJob(uri=uri or self._lab.scenario.read_uri, target="*")
        self._call(self._lab.enqueue([job]))

    def reset(self) -> None:
        """Every state back to version 1, and a new observation run: :meth:`report`
        sees only what happens from now on."""

        async def again() -> None:
            redis = state.connect(self._lab.redis_url)
            try:
                await state.reset_states(redis)
                self._lab.run_id = await reader.start_run(redis)
            finally:
                await redis.aclose()

        self._call(again())

    def report(self, client_name: str | None = None) -> LabVerdict:
        """The verdict of ``client_name`` (its clientInfo name) since the last reset;
        without a name, of the one client there was. With no client at all, a level-0
        verdict that says so; LookupError naming the clients seen when the one asked for
        is not among them (or, without a name, there were several)."""
        _, made = self._call(self._lab.evidence())
        clients = [c for c in made.clients if c.client != protocol.UNKNOWN_CLIENT]
        if not clients:  # nothing to name: no client at all is a verdict, level 0
            seen = ", ".join(f"{c.client}/{c.version}" for c in made.clients)
            why = "no client connected since the last reset"
            return LabVerdict(
                client_name or "", "", 0, LEVEL_NAMES[0],
                [f"{why} (only messages of no client: {seen})" if seen else why],
                {box: False for box in CHECKPOINT_BOXES.values()},
            )  # fmt: skip
        if client_name is not None:
            clients = [c for c in clients if c.client == client_name]
        if len(clients) != 1:
            seen = ", ".join(f"{c.client}/{c.version}" for c in made.clients) or "none"
            wanted = repr(client_name) if client_name else "one client"
            raise LookupError(f"report: {wanted} not found once in this run (seen: {seen})")
        return _verdict(clients[0])

    def stop(self) -> None:
        try:
            self._call(self._context.__aexit__(None, None, None))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CALL_SECONDS)
            self._loop.close()


def _verdict(client: ClientScore) -> LabVerdict:
    checkpoints = client.best.checkpoints
    checklist = {box: checkpoints[cp] is not None for cp, box in CHECKPOINT_BOXES.items()}
    return LabVerdict(
        client.client,
        client.version,
        client.level,
        LEVEL_NAMES[client.level],
        list(client.notes),
        checklist,
        {check.key: check.answer for check in client.checks},
    )


def start(workdir: Path, scenario: str = registry.DEFAULT) -> FixtureLab:
    """A lab playing ``scenario``, its files in ``workdir``; stop it with :meth:`stop`."""
    return FixtureLab(workdir, scenario)
