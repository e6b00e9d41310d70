"""The scripted model: what it answers a CLI, and what it saw.

The HTTP endpoint around it (four wire APIs) is :mod:`mcp_lab.runners.clients.endpoint`; each
request reaches :meth:`ScriptedModel.decide` as a :class:`~mcp_lab.runners.clients.apis.Turn`.
It plays one of two scripts:

``scored`` (the verdict's run; the model never asks for the resource twice)
    1. read the resource once, through the CLI's resource-read tool (loaded first
       through the CLI's tool search when the CLI offers it deferred, and called
       through the CLI's tool bridge when the search only shows it), or through the
       lab's own tool when the CLI offers no resource tool (:mod:`mcp_lab.runners.clients.tools`);
    2. when that result is back (or, when it is offered tools but none to read with,
       at the first request with tools; a request with no tools gets a plain answer, so
       a model never offered tools never gets here), await the
       update hook (the runner applies the lab's update there), then take *neutral*
       steps for ``observe_seconds``: a call of a tool that reads nothing of the lab
       every ``step_seconds`` (or none, where the CLI offers no such tool), then answer
       in text;
    3. a later turn of the same session (the CLI's continue flag) gets one more
       neutral step and a text answer.
    Every request after the update is inspected: version 2 of the resource anywhere
    in it is a *push*, a text the CLI added that says the resource changed is a
    *notice* (:attr:`ModelRecord.reflected`). Only those are level 7: the client put
    the update into its model's context without the model asking.

``pull`` (a separate question: can the client read the new version when asked?)
    read, await the update hook, read again, answer. Never a level.

Requests without tools (titles, next-speaker checks) get a plain answer, or an object
filled from the requested JSON schema. A request the script cannot answer (a CLI that
names its read tool but offers no way to call it, a failed update) is the runner's
failure (:attr:`ModelRecord.failure`), never a client level.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from mcp_lab.catalog import RESOURCE_TEXT, REVIEW_STATUS, SERVER_INSTRUCTIONS, versions_in
from mcp_lab.runners.clients import tools as picks
from mcp_lab.runners.clients.apis import Reply, Turn

logger = logging.getLogger("mcp_lab.model")

SCORED, PULL = "scored", "pull"
ATTACHMENT = "attachment"
MODES = (SCORED, PULL)
_UPDATE_WORDS = re.compile(
    r"\b(update[sd]?|change[sd]?|modified|new version|notifications/resources/updated)\b",
    re.I,
)
_STEP_SECONDS = 1.5
_OBSERVE_SECONDS = 6.0
_SEARCHES = 2  # tool-search calls the model makes before it gives up
_WAITS = 2  # calls of a wait-for-MCP-servers tool the model makes at most
_EXCERPT = 240


def _mentions_resource(text: str, uri: str) -> bool:
    return uri in text or uri.split("://", 1)[-1] in text or REVIEW_STATUS.name in text


@dataclass
class Reflection:
    """The first request in which the update reached the model unasked."""

    kind: str  # "push": version >= 2 of the resource; "notice": a text saying it changed
    request: int  # the request's number in the run (1-based)
    at_ms: int
    excerpt: str


@dataclass
class ModelRecord:
    """What the scripted model saw during one run."""

    mode: str = SCORED
    api: str | None = None
    requests: int = 0
    tools_offered: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)  # tool-search queries made
    templates_tool: str | None = None  # the template-list tool it called first, if any
    waits: int = 0  # calls of the CLI's wait-for-MCP-servers tool before the read
    read_tool: str | None = None  # the tool the model read the resource with
    bridge: str | None = None  # the tool it called the read tool through (``tool_call``)
    # VIA_RESOURCE_TOOL (the CLI's), VIA_SERVER_TOOL (the lab's), ATTACHMENT (in the prompt)
    read_via: str | None = None
    attached: bool | None = None  # attached scenario: was the resource in the first request
    read_calls: int = 0
    read_results: list[str] = field(default_factory=list)  # of the reads the model asked for
    read_results_ms: list[int] = field(default_factory=list)  # when each came back
    neutral_tool: str | None = None
    neutral_calls: int = 0
    update_applied_ms: int | None = None
    after_update: int = 0  # model requests the CLI sent after the update was applied
    reflected: Reflection | None = None
    answer: str | None = None
    answers: int = 0  # text answers given (one per turn of the CLI)
    failure: str | None = None  # what the script could not do: the runner's failure
    unserved: list[str] = field(default_factory=list)  # requests to paths it does not serve

    @property
    def versions_seen(self) -> list[int]:
        """The resource versions in the results of the reads the model asked for."""
        return [v for text in self.read_results for v in versions_in(text)]

    @property
    def saw_v1(self) -> bool:
        return 1 in self.versions_seen

    @property
    def saw_v2(self) -> bool:
        """Version 2 (or later) came back from a read the model asked for."""
        return any(v >= 2 for v in self.versions_seen)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(versions_seen=self.versions_seen, saw_v1=self.saw_v1, saw_v2=self.saw_v2)
        return data


# Called with no arguments; what it returns (the runner's publish_update returns the
# updater's log line) is not used.
UpdateHook = Callable[[], Awaitable[object]]


class ScriptedModel:
    """The script and its record; :func:`mcp_lab.runners.clients.endpoint.build_app` puts the
    wire APIs around it."""

    def __init__(
        self,
        server_name: str,
        uri: str,
        on_update: UpdateHook | None = None,
        *,
        mode: str = SCORED,
        observe_seconds: float = _OBSERVE_SECONDS,
        step_seconds: float = _STEP_SECONDS,
        update_timeout: float = 30.0,
        lab_texts: Iterable[str] = (SERVER_INSTRUCTIONS, REVIEW_STATUS.description),
        attach: bool = False,
        list_templates: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {MODES}")
        self.server_name = server_name
        self.uri = uri
        self.mode = mode
        self.record = ModelRecord(mode=mode)
        # Every request and the reply it got, for the run's folder.
        self.exchanges: list[dict[str, Any]] = []
        self._on_update = on_update
        self._observe_seconds = observe_seconds
        self._step_seconds = step_seconds
        self._update_timeout = update_timeout
        self._lab_texts = [t for t in lab_texts if t]
        self._attach = attach
        self._list_templates = list_templates
        self._update: asyncio.Task[object] | None = None
        self._answered = asyncio.Event()
        self._phase = "read"
        self._pending: str | None = None  # the kind of the model's last tool call
        self._window_end = 0.0
        self._later_steps = 0
        self._seen: set[str] = set()
        # The schemas of the deferred tools the CLI's tool search showed, by name.
        self._searched: dict[str, dict[str, Any]] = {}

    async def decide(self, api: str, turn: Turn) -> Reply:
        """The next reply for ``turn`` (see the module docstring)."""
        self.record.requests += 1
        number = self.record.requests
        logger.info(
            "[model] %s request %d: %d tool(s), %d tool result(s)",
            api,
            number,
            len(turn.tools),
            len(turn.results),
        )
        at_ms = int(time.time() * 1000)
        try:
            reply = await self._decide(api, turn, number, at_ms)
        except Exception as exc:  # a request the script cannot answer: the runner's fault
            self.record.failure = self.record.failure or f"{type(exc).__name__}: {exc}"
            logger.exception("[model] request %d failed", number)
            reply = Reply(text="The scripted model failed on this request.")
        self.exchanges.append(
            {
                "request": number,
                "api": api,
                "at_ms": at_ms,
                "body": turn.body,
                "reply": asdict(reply),
            }
        )
        return reply

    def unserved(self, method: str, path: str) -> None:
        """A request to a path the endpoint does not serve (kept for the row's notes)."""
        self.record.unserved.append(f"{method} {path}")

    async def _decide(self, api: str, turn: Turn, number: int, at_ms: int) -> Reply:
        self._observe(turn, number, at_ms)
        if not turn.tools:  # a side request (a title, a next-speaker check)
            if turn.json_schema is not None:
                return Reply(text=json.dumps(picks.fill_schema(turn.json_schema)))
            return Reply(text="ok")
        # A request with tools carries the result of the model's last call, if any.
        answered, self._pending = self._pending, None
        own_result = turn.results[-1] if answered == "read" and turn.results else ""
        record = self.record
        record.api = api
        if not record.tools_offered:
            record.tools_offered = list(turn.tools)
        if answered == "search" and turn.results:
            self._searched.update(picks.searched_schemas(turn.results[-1]))
        if answered == "read":
            record.read_results.append(own_result)
            record.read_results_ms.append(at_ms)
        if self._phase == "read":
            return await self._first_read(turn)
        if self._phase == "first-result":
            await self._await_update()
            if self.mode == PULL:
                self._phase = "second-result"
                return self._read(turn)
            self._phase = "observe"
            self._window_end = time.monotonic() + self._observe_seconds
        if self._phase == "observe":
            return await self._observe_step(turn)
        if self._phase == "second-result":
            self._phase = "answered"
            return self._answer(
                "First read: " + _summary(record.read_results[0] if record.read_results else "")
                + "; second read: " + _summary(own_result)
            )  # fmt: skip
        return self._later_turn(turn)

    async def _first_read(self, turn: Turn) -> Reply:
        """Call the read tool (loading it through a tool search first, if need be); in
        the attached scenario, take the resource the CLI attached to the prompt."""
        record = self.record
        if self._attach:
            return await self._attached(turn)
        templates = picks.pick_template_list(turn.tools) if self._list_templates else None
        if templates is not None and record.templates_tool is None:
            record.templates_tool = templates
            self._pending = "templates"
            arguments = picks.fill_schema(turn.tools[templates], {"server": self.server_name})
            return Reply(tool=templates, arguments=arguments)
        picked = picks.pick_tool(turn.tools)
        if picked is not None:
            record.read_tool, record.read_via = picked
            self._phase = "first-result"
            return self._read(turn)
        bridge = picks.pick_tool_bridge(turn.tools)
        shown = picks.pick_tool(self._searched) if bridge is not None else None
        if shown is not None:
            # The search showed the read tool's schema; only the bridge calls it.
            (record.read_tool, record.read_via), record.bridge = shown, bridge
            self._phase = "first-result"
            return self._read(turn)
        wait = picks.pick_wait_for_servers(turn.tools)
        if wait is not None and record.waits < _WAITS:
            # The CLI asked before its MCP servers were up: wait for them, as a model would.
            record.waits += 1
            self._pending = "wait"
            return Reply(tool=wait, arguments=picks.fill_schema(turn.tools[wait]))
        search = picks.pick_tool_search(turn.tools)
        read, neutral = picks.deferred_names(turn.texts)
        if search is not None and len(record.searches) < _SEARCHES:
            # The names the request gives first; a keyword query when that loaded none.
            query = picks.search_query(read if not record.searches else None, neutral)
            record.searches.append(query)
            self._pending = "search"
            arguments = picks.fill_schema(turn.tools[search], {"query": query})
            return Reply(tool=search, arguments=arguments)
        if read is not None:
            record.failure = (
                f"the CLI names its read tool {read} but the model could not call it "
                f"(offered: {', '.join(turn.tools)}; searches: {record.searches or 'none'})"
            )
            self._phase = "answered"
            return self._answer(f"Could not call {read}.")
        # Nothing to read with: the update is applied all the same, and the model waits
        # (in neutral steps) for the client to bring it unasked.
        await self._await_update()
        if self.mode == PULL:
            self._phase = "answered"
            return self._answer(
                f"Neither a resource-read tool nor the server's {picks.SERVER_TOOL} was "
                f"offered (tools: {', '.join(turn.tools)})."
            )
        self._phase = "observe"
        self._window_end = time.monotonic() + self._observe_seconds
        return await self._observe_step(turn)

    async def _attached(self, turn: Turn) -> Reply:
        """The prompt attached the resource (``@server:uri``): the CLI should have put its
        text in the request. Either way the update is applied and watched, as after a
        read; the record says whether the attachment was there."""
        record = self.record
        attached = next((t for t in turn.texts if versions_in(t)), None)
        record.attached = attached is not None
        if attached is not None:
            record.read_via = ATTACHMENT
            record.read_results.append(attached)
            record.read_results_ms.append(int(time.time() * 1000))
        await self._await_update()
        self._phase = "observe"
        self._window_end = time.monotonic() + self._observe_seconds
        return await self._observe_step(turn)

    def _read(self, turn: Turn) -> Reply:
        record = self.record
        assert record.read_tool is not None
        record.read_calls += 1
        self._pending = "read"
        values = {"server": self.server_name, "uri": self.uri}
        if record.bridge is not None:
            arguments = picks.fill_schema(self._searched.get(record.read_tool, {}), values)
            schema = turn.tools.get(record.bridge, {})
            bridged = picks.bridge_arguments(schema, record.read_tool, arguments)
            return Reply(tool=record.bridge, arguments=bridged)
        return Reply(
            tool=record.read_tool,
            arguments=picks.fill_schema(turn.tools.get(record.read_tool, {}), values),
        )

    async def _observe_step(self, turn: Turn) -> Reply:
        """A neutral step every ``step_seconds`` until the window closes; then the answer."""
        left = self._window_end - time.monotonic()
        if left <= 0:
            self._phase = "answered"
            return self._first_answer()
        neutral = picks.pick_neutral_tool(turn.tools)
        if neutral is None:
            await asyncio.sleep(left)  # the window is the measurement: nothing to await
            self._phase = "answered"
            return self._first_answer()
        await asyncio.sleep(min(self._step_seconds, left))
        return self._neutral(turn, neutral)

    def _later_turn(self, turn: Turn) -> Reply:
        """A later turn (the CLI's continue flag): one neutral step, then an answer."""
        neutral = picks.pick_neutral_tool(turn.tools)
        if neutral is not None and self._later_steps < 1:
            self._later_steps += 1
            return self._neutral(turn, neutral)
        return self._answer("Done.")

    def _neutral(self, turn: Turn, tool: str) -> Reply:
        record = self.record
        record.neutral_tool = record.neutral_tool or tool
        record.neutral_calls += 1
        self._pending = "neutral"
        return Reply(tool=tool, arguments=picks.neutral_arguments(turn.tools[tool]))

    def _first_answer(self) -> Reply:
        first = self.record.read_results[0] if self.record.read_results else ""
        return self._answer(f"The resource said: {_summary(first)}.")

    def _answer(self, text: str) -> Reply:
        self.record.answer = text
        self.record.answers += 1
        self._answered.set()
        return Reply(text=text)

    async def answered(self, count: int, timeout: float) -> bool:
        """Whether the model has answered in text ``count`` times within ``timeout``
        seconds (an interactive CLI's turn is over when it has)."""

        async def enough() -> None:
            while self.record.answers < count:
                self._answered.clear()
                await self._answered.wait()

        try:
            await asyncio.wait_for(enough(), timeout)
        except TimeoutError:
            return False
        return True

    def _observe(self, turn: Turn, number: int, at_ms: int) -> None:
        """Look for the update in what the CLI sent, once the update was applied:
        version 2 anywhere is a push (the scored model read once, before the update),
        a new text naming the resource and a change is a notice. A side request (no
        tools: a title, a next-speaker check) is not the agent's conversation: it often
        quotes the user's words about the resource, and is never a push or a notice."""
        texts = [self._without_lab_texts(t) for t in turn.texts]
        fresh = [t for t in texts if t and t not in self._seen]
        self._seen.update(texts)
        record = self.record
        if record.update_applied_ms is None or self.mode != SCORED:
            return
        record.after_update += 1
        if not turn.tools:
            return
        if record.reflected is not None and record.reflected.kind == "push":
            return
        for text in fresh:
            if any(v >= 2 for v in versions_in(text)):
                record.reflected = Reflection("push", number, at_ms, text[:_EXCERPT])
                return
            if (
                record.reflected is None
                and _mentions_resource(text, self.uri)
                and _UPDATE_WORDS.search(text)
            ):
                record.reflected = Reflection("notice", number, at_ms, text[:_EXCERPT])

    def _without_lab_texts(self, text: str) -> str:
        for known in self._lab_texts:
            text = text.replace(known, "")
        return text.strip()

    async def _await_update(self) -> None:
        """Run the update hook once (a retried request waits for the same run)."""
        if self._on_update is None:
            self.record.update_applied_ms = int(time.time() * 1000)
            return
        if self._update is None:
            self._update = asyncio.ensure_future(self._on_update())
        try:
            await asyncio.wait_for(asyncio.shield(self._update), self._update_timeout)
        except Exception as exc:  # the run goes on; the row says the runner failed
            self.record.failure = self.record.failure or (
                f"the lab's update failed: {type(exc).__name__}: {exc}"
            )
            logger.warning("[model] update hook failed: %s", self.record.failure)
            return
        self.record.update_applied_ms = int(time.time() * 1000)


def _summary(text: str) -> str:
    match = RESOURCE_TEXT.search(text)
    if match:
        return f"status {match.group(1)} (version {match.group(2)})"
    return json.dumps(text[:80])
