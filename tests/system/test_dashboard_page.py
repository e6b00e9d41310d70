"""The dashboard page (``services/mcp_lab/server/dashboard.html``) in a real headless Chromium.

A small Starlette stand-in serves the page as the lab does (``/``), a report
(``/api/report``) and a Server-Sent Events stream of reports (``/api/stream``),
with uvicorn on a free 127.0.0.1 port in a background thread. The test decides
when the stream sends the next report (``StubLab.publish``), so nothing waits
on a clock. Playwright drives Debian's chromium (``apt-get install chromium``);
without it these tests skip, and with ``CI=true`` they fail.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mcp_lab.evidence import formats, picture
from mcp_lab.evidence.report import levels_json
from mcp_lab.server import exports
from tests.support.browser import ARTIFACTS, expect

URI = "test://review/status"
RUN_ID = "1796032824497-0"
SESSION = "92520d78a3b7430fba4eb9888d9c2cfa"
SECOND_SESSION = "0f3c2a9e5d6b4e1f8a7c6b5d4e3f2a1b"
HOSTILE_NAME = '<img src=x onerror="window.__xss=1">'
# The stand-in reports carry the lab's own level declarations, as the lab's reports do.
LEVELS = levels_json()["levels"]
# (checkpoint reached at level 1..6, its time, the event behind it)
STEPS = [
    ("connected", "10:00:24.012", ("in", "initialize", None, None, None)),
    ("discovered", "10:00:24.100", ("in", "resources/list", None, None, None)),
    ("read_initial", "10:00:24.180", ("in", "resources/read", URI, 1, None)),
    ("subscribed", "10:00:24.250", ("in", "resources/subscribe", URI, None, None)),
    ("notified", "10:00:29.260", ("out", "notifications/resources/updated", URI, 2, True)),
    ("re_read", "10:00:29.272", ("in", "resources/read", URI, 2, None)),
]


def iso(hms: str) -> str:
    return f"2026-11-30T{hms}Z"


def event(hms, direction, method, uri=None, version=None, delivered=None, error=None):
    return {
        "time": iso(hms),
        "direction": direction,
        "method": method,
        "uri": uri,
        "version": version,
        "delivered": delivered,
        "error": error,
    }


def session_at(session_id: str, level: int) -> dict[str, Any]:
    checkpoints = {name: iso(hms) if i < level else None for i, (name, hms, _) in enumerate(STEPS)}
    return {
        "session": session_id,
        "protocol": "2025-11-25",
        "transport": "streamable-http",
        "level": level,
        "level_name": LEVELS[str(level)],
        "checkpoints": checkpoints,
        "reread_delay_ms": 12.0 if level >= 6 else None,
        "dropped_notifications": 0,
        "notes": [] if level >= 6 else [f"stopped after {LEVELS[str(level)]}"],
        "events": [event(hms, *ev) for _, hms, ev in STEPS[:level]],
    }


def report_at(level: int) -> dict[str, Any]:
    """A report where claude-code/1.2.3 got to ``level``, next to a client with
    a hostile name; from level 6 on, with a second session that has a dropped
    notification and an error."""
    sessions = [session_at(SESSION, level)]
    if level >= 6:
        second = session_at(SECOND_SESSION, 4)
        second["dropped_notifications"] = 1
        second["notes"] = ["notification dropped: no GET stream open"]
        second["events"] += [
            event("10:00:25.001", "in", "resources/read", "test://nope", error=-32002),
            event("10:00:29.261", "out", "notifications/resources/updated", URI, 2, False),
        ]
        sessions.append(second)
    hostile = session_at("deadbeef", 1)
    return {
        "run": {"id": RUN_ID, "started": "2026-11-30T10:00:18.876Z"},
        "generated": iso("10:00:30.001" if level >= 6 else "10:00:24.200"),
        **levels_json(),
        "clients": [
            {
                "client": "claude-code",
                "version": "1.2.3",
                "level": level,
                "level_name": LEVELS[str(level)],
                "best_session": SESSION,
                "notes": sessions[0]["notes"],
                "sessions": sessions,
            },
            {
                "client": HOSTILE_NAME,
                "version": "</td><script>window.__xss=2</script>",
                "level": 1,
                "level_name": LEVELS["1"],
                "best_session": "deadbeef",
                "notes": ["<b>not bold</b>"],
                "sessions": [hostile],
            },
        ],
    }


class StubLab:
    """The lab's dashboard endpoints, with reports the test publishes.

    ``publish``, ``hold_streams``, ``release_streams`` and ``shutdown`` are
    called from the test's thread: each runs on the server's event loop and
    returns once done there.
    """

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report
        self.matrix: dict[str, Any] = {"scenarios": [], "clients": []}
        self.stream_connections = 0
        self.ready = threading.Event()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self._accepting = asyncio.Event()
        self._accepting.set()
        self._reporting = asyncio.Event()
        self._reporting.set()
        self.app = Starlette(
            routes=[
                Route("/", self.index),
                Route("/api/report", self.current),
                Route("/api/stream", self.stream),
                Route("/api/picture", self.picture),
                Route("/api/matrix", self.clients_matrix),
            ],
            lifespan=self._lifespan,
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        self.ready.set()
        yield

    async def index(self, request: Request) -> Response:
        return HTMLResponse(exports.page())  # the page as the lab serves it

    async def current(self, request: Request) -> Response:
        await self._reporting.wait()  # held by hold_reports
        return JSONResponse(self.report)

    async def picture(self, request: Request) -> Response:
        """A session's picture, drawn by the lab's own code from the current report."""
        label = request.query_params.get("session")
        for client in self.report["clients"]:
            for session in client["sessions"]:
                if session["session"] == label:
                    flow = picture.flow_of(session, client["client"], client["version"])
                    return Response(picture.session_svg(flow), media_type="image/svg+xml")
        return Response(status_code=404)

    async def clients_matrix(self, request: Request) -> Response:
        return JSONResponse(self.matrix)

    async def stream(self, request: Request) -> Response:
        await self._accepting.wait()  # a held stream: the browser keeps connecting
        if self._closed:
            return Response(status_code=503)
        self.stream_connections += 1
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._streams.add(queue)
        queue.put_nowait(self.report)

        async def events() -> AsyncIterator[str]:
            try:
                yield "retry: 200\n\n"  # reconnect soon after a dropped stream
                while (report := await queue.get()) is not None:
                    yield f"event: report\ndata: {json.dumps(report)}\n\n"
            finally:
                self._streams.discard(queue)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    def _run(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the server's loop and wait (bounded) until it has run."""
        assert self._loop is not None, "server not started"

        async def call() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=5)

    def _end_streams(self) -> None:
        for queue in self._streams:
            queue.put_nowait(None)

    def publish(self, report: dict[str, Any]) -> None:
        """Make ``report`` current and send it on every open stream."""

        def fan_out() -> None:
            self.report = report
            for queue in self._streams:
                queue.put_nowait(report)

        self._run(fan_out)

    def hold_streams(self) -> None:
        """End every open stream and keep new ones waiting (no answer yet)."""

        def hold() -> None:
            self._accepting.clear()
            self._end_streams()

        self._run(hold)

    def release_streams(self) -> None:
        self._run(self._accepting.set)

    def hold_reports(self) -> None:
        """Keep every ``/api/report`` waiting (no answer yet)."""
        self._run(self._reporting.clear)

    def release_reports(self) -> None:
        self._run(self._reporting.set)

    def shutdown(self) -> None:
        """End every stream and refuse new ones, so the server stops at once."""

        def close() -> None:
            self._closed = True
            self._accepting.set()
            self._reporting.set()
            self._end_streams()

        self._run(close)


@contextmanager
def serve(stub: StubLab) -> Iterator[str]:
    """Run ``stub`` with uvicorn on a free 127.0.0.1 port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(stub.app, log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not stub.ready.wait(timeout=10):
            pytest.fail("stub server did not start within 10 s")
        yield f"http://127.0.0.1:{port}"
    finally:
        if stub.ready.is_set():
            stub.shutdown()
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def stub_lab():
    stub = StubLab(report_at(3))
    with serve(stub) as base_url:
        yield stub, base_url


def client_row(page, name="claude-code/1.2.3"):
    return page.locator(f'#client-rows tr[data-client="{name}"]')


def test_page_follows_the_stream_without_reload(stub_lab, page, errors):
    stub, base_url = stub_lab
    navigations = []
    page.on("framenavigated", lambda frame: frame == page.main_frame and navigations.append(1))

    page.goto(f"{base_url}/")
    expect(page).to_have_title("mcp-subscribe-lab")
    expect(page.locator("#status")).to_have_text("live")
    expect(page.locator("#run-id")).to_have_text(RUN_ID)
    expect(page.locator("#run-started")).to_have_text("2026-11-30 10:00:18.876")
    expect(page.locator("#clients-head th")).to_have_text(
        [
            "Client",
            "Level",
            *[LEVELS[str(n)] for n in range(1, 7)],
            "Re-read delay",
            "Sessions",
            "Notes",
        ]
    )
    expect(page.locator("#legend")).to_contain_text("0 no connection · 1 connected · 2 discovered")
    row = client_row(page)
    expect(row).to_have_attribute("data-level", "3")
    expect(row.get_by_test_id("level")).to_have_text("3 read initial")
    expect(row.locator("td.time")).to_have_text(
        ["10:00:24.012", "10:00:24.100", "10:00:24.180", "—", "—", "—"]
    )
    loaded_at = page.evaluate("window.__loadedAt")
    assert loaded_at

    stub.publish(report_at(6))

    expect(row).to_have_attribute("data-level", "6")
    expect(row.get_by_test_id("level")).to_have_text("6 re-read")
    expect(row.locator("td.time")).to_have_text([hms for _, hms, _ in STEPS])
    expect(row.locator("td.num")).to_have_text(["12.0 ms", "2"])
    expect(page.locator("#generated")).to_have_text("10:00:30.001")
    second = page.locator(f'[data-session="{SECOND_SESSION}"]')
    expect(second.locator("tr.problem")).to_have_count(2)
    expect(second.locator("tr.problem .tag")).to_have_text(["✗ error -32002", "✗ dropped"])
    expect(page.locator(f'[data-session="{SESSION}"] .tag.ok')).to_have_text("✓ delivered")
    expect(page.locator("#status")).to_have_text("live")
    assert page.evaluate("window.__loadedAt") == loaded_at, "the page was reloaded"
    assert len(navigations) == 1, "the page navigated again"

    # Untrusted text is shown as text, never parsed as HTML.
    hostile = page.locator("#client-rows tr").nth(1)
    expect(hostile).to_have_attribute(
        "data-client", f"{HOSTILE_NAME}/</td><script>window.__xss=2</script>"
    )
    expect(hostile.locator("td").first).to_contain_text(HOSTILE_NAME)
    expect(hostile.locator("li")).to_have_text("<b>not bold</b>")
    expect(page.locator("#client-rows img, #client-rows b, #details img")).to_have_count(0)
    assert page.evaluate("window.__xss") is None

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "dashboard-stub.png", full_page=True)
    assert errors == []


def test_status_shows_reconnecting_then_catches_up(stub_lab, page, errors):
    stub, base_url = stub_lab
    page.goto(f"{base_url}/")
    expect(page.locator("#status")).to_have_text("live")
    expect(client_row(page)).to_have_attribute("data-level", "3")

    stub.hold_streams()
    expect(page.locator("#status")).to_have_text("reconnecting")
    stub.publish(report_at(6))  # no stream is open: the page cannot know yet
    expect(client_row(page)).to_have_attribute("data-level", "3")

    stub.release_streams()
    expect(page.locator("#status")).to_have_text("live")
    expect(client_row(page)).to_have_attribute("data-level", "6")
    assert stub.stream_connections == 2
    assert errors == []


def test_report_is_fetched_while_the_stream_is_not_open(stub_lab, page, errors):
    stub, base_url = stub_lab
    stub.hold_streams()
    page.goto(f"{base_url}/")
    expect(client_row(page)).to_have_attribute("data-level", "3")
    expect(page.locator("#status")).to_have_text("connecting")

    stub.release_streams()
    expect(page.locator("#status")).to_have_text("live")
    assert errors == []


def test_header_before_any_reset_reads_since_the_first_event(stub_lab, page, errors):
    stub, base_url = stub_lab
    page.goto(f"{base_url}/")
    expect(page.locator("#run-started-label")).to_have_text("started")
    stub.publish({**report_at(3), "run": {"id": "0-0", "started": None}})
    expect(page.locator("#run-id")).to_have_text("all (no reset yet)")
    expect(page.locator("header")).to_contain_text("since the first event recorded")
    expect(page.locator("header")).not_to_contain_text("start of the record")
    assert errors == []


def test_the_scenario_and_its_own_checkpoints_are_shown(stub_lab, page, errors):
    stub, base_url = stub_lab
    page.goto(f"{base_url}/")
    report = report_at(6)
    report["scenario"] = {"name": "repeated", "summary": "3 updates", "uri": URI}
    report["clients"][0]["checks"] = [
        {"key": "notified_each", "title": "notified", "answer": "3/3", "time": None, "ok": True},
        {"key": "re_read_each", "title": "re-read after each", "answer": "1/3", "time": None,
         "ok": False},
    ]  # fmt: skip
    stub.publish(report)
    expect(page.get_by_test_id("scenario")).to_have_text("repeated")
    row = client_row(page)
    expect(row.locator('[data-check="re_read_each"]')).to_have_text("1/3")
    expect(row.locator('[data-check="re_read_each"] .tag.bad')).to_have_count(1)
    expect(page.locator("#clients-head")).to_contain_text("re-read after each")
    assert errors == []


def test_each_session_shows_its_picture_drawn_by_the_lab(stub_lab, page, errors):
    stub, base_url = stub_lab
    page.goto(f"{base_url}/")
    first = page.locator(f'figure.picture[data-picture="{SESSION}"]')
    expect(first.locator("svg.flow")).to_have_attribute("data-level", "3")

    stub.publish(report_at(6))
    # The session changed: its picture is fetched again and follows it.
    expect(first.locator("svg.flow")).to_have_attribute("data-level", "6")
    expect(first).to_have_attribute("data-loaded", "yes")
    expect(first.locator("g.checkpoint")).to_have_count(6)
    second = page.locator(f'figure.picture[data-picture="{SECOND_SESSION}"]')
    second.scroll_into_view_if_needed()
    expect(second.locator("g.notification.dropped")).to_have_count(1)
    expect(second.locator("g.request.error text").first).to_have_text("resources/read")
    # The hostile client's picture shows its name as text; nothing of it ran.
    hostile = page.locator('figure.picture[data-picture="deadbeef"]')
    hostile.scroll_into_view_if_needed()
    expect(hostile.locator('[data-lane="client"] text')).to_contain_text("<img src=x")
    expect(page.locator("figure.picture img, figure.picture script")).to_have_count(0)
    assert page.evaluate("window.__xss") is None
    # The downloads sit in the header, a file of each report format.
    expect(page.locator(".exports a")).to_have_count(len(formats.FORMATS))
    for fmt in formats.FORMATS:
        link = page.locator(f"#export-{fmt.name}")
        expect(link).to_have_attribute("href", fmt.path)
        expect(link).to_have_attribute("download", "")
    assert errors == []


def test_the_matrix_view_shows_the_latest_verdict_and_the_history_behind_it(
    stub_lab, page, errors, tmp_path
):
    from mcp_lab.runners.clients.history import CLIENT_HISTORY
    from mcp_lab.runners.clients.matrix import Check, ClientRow

    def row(version: str, level: int, subscribed: str) -> ClientRow:
        made = ClientRow(
            "inspector",
            version,
            "single",
            "no tool",
            transport="http",
            level=level,
            server_level=level,
        )
        made.checklist = {"read": Check("yes", 1.0), "subscribed": Check(subscribed)}
        return made

    kept = tmp_path / "history.sqlite3"
    CLIENT_HISTORY.record([row("2.12.0", 3, "no")], path=kept, when="2026-11-01T10:00:00Z")
    CLIENT_HISTORY.record([row("2.13.0", 5, "yes")], path=kept, when="2026-12-01T10:00:00Z")
    stub, base_url = stub_lab
    stub.matrix = CLIENT_HISTORY.matrix(kept)

    page.goto(f"{base_url}/#matrix")
    expect(page.locator("#matrix-view")).to_be_visible()
    expect(page.locator("#run-view")).to_be_hidden()
    expect(page.locator("#matrix-head th")).to_have_text(["Client", "single"])
    cell = page.locator('#matrix-rows tr[data-client="inspector"] td[data-scenario="single"]')
    expect(cell.locator(".setup")).to_have_text("no tool · http: 5 notified 2.13.0 · 2026-12-01")
    expect(cell.locator("summary")).to_have_text("history: 2 verdict(s), 1 change(s)")
    cell.locator("summary").click()
    expect(cell.locator("li.changed")).to_have_text(
        "2026-12-01 10:00 · 2.13.0 · level 5 notified · changed: "
        "2.13.0: level 3 -> 5; subscribed: no -> yes"
    )
    expect(page.locator("#no-bridges")).to_be_visible()  # no bridges run kept
    page.locator("#view-run").click()
    expect(page.locator("#run-view")).to_be_visible()
    assert errors == []


def test_the_matrix_view_shows_the_bridges_latest_marks_and_their_history(
    stub_lab, page, errors, tmp_path
):
    from mcp_lab.runners.bridges.history import BRIDGE_HISTORY
    from mcp_lab.runners.bridges.verdict import BridgeRow, StepCell

    def row(version: str, through: bool) -> BridgeRow:
        made = BridgeRow("supergateway", version, "stdio->HTTP", "single", lab_level=5)
        made.steps = {"subscribe": StepCell("passed"), "list_changed": StepCell("-")}
        made.steps["notified"] = StepCell("passed", "", "1/1") if through else StepCell(
            "dropped", "the lab delivered 1 to the bridge", "0/1"
        )  # fmt: skip
        return made

    kept = tmp_path / "history.sqlite3"
    BRIDGE_HISTORY.record([row("4.0.0", False)], path=kept, when="2026-11-01T10:00:00Z")
    BRIDGE_HISTORY.record([row("4.1.0", True)], path=kept, when="2026-12-01T10:00:00Z")
    stub, base_url = stub_lab
    bridges = BRIDGE_HISTORY.matrix(kept)
    stub.matrix = {"scenarios": [], "clients": [], "bridges": bridges["bridges"],
                   "bridge_steps": bridges["steps"]}  # fmt: skip

    page.goto(f"{base_url}/#matrix")
    expect(page.locator("#bridges-head th")).to_have_text(["Bridge", "Direction", "single"])
    cell = page.locator(
        '#bridges-rows tr[data-bridge="supergateway"][data-direction="stdio->HTTP"] '
        'td[data-scenario="single"]'
    )
    expect(cell.locator(".setup")).to_have_text("4.1.0 · 2026-12-01")
    expect(cell.locator(".marks li")).to_have_text(["subscribe at lab passed", "notified passed"])
    expect(cell.locator('.marks li[data-step="notified"]')).to_have_attribute("data-mark", "passed")
    expect(cell.locator("summary")).to_have_text("history: 2 verdict(s), 1 change(s)")
    cell.locator("summary").click()
    expect(cell.locator("li.changed")).to_have_text(
        "2026-12-01 10:00 · 4.1.0 · changed: 4.1.0: notified passed 1/1 (was dropped 0/1)"
    )
    expect(page.locator("#no-bridges")).to_be_hidden()
    assert errors == []


def test_the_page_says_no_client_only_once_a_report_says_so(stub_lab, page, errors):
    """Before the lab's first report arrives (report and stream held), the page says it
    is waiting; "No client has connected yet." comes with a report that has none (it
    was painted first, before any data)."""
    stub, base_url = stub_lab
    stub.hold_streams()
    stub.hold_reports()
    stub.report = {**report_at(0), "clients": []}
    page.goto(base_url)
    expect(page.locator("#waiting")).to_be_visible()
    expect(page.locator("#no-clients")).to_be_hidden()
    stub.release_reports()
    expect(page.locator("#no-clients")).to_be_visible()
    expect(page.locator("#waiting")).to_be_hidden()
    assert errors == []


def test_the_matrix_labels_each_transport_and_fits_1280_px(stub_lab, page, errors, tmp_path):
    """Six scenarios, each run over http and stdio in two setups: every cell names its
    transport, and the whole table (its last column too) is inside a 1280 px window."""
    from mcp_lab.runners.clients.history import CLIENT_HISTORY
    from mcp_lab.runners.clients.matrix import Check, ClientRow

    scenarios = ["single", "repeated", "unsubscribe", "list-changed", "template", "multi"]
    rows = []
    for scenario in scenarios:
        for setup in ("no tool", "tool"):
            for transport in ("http", "stdio"):
                made = ClientRow(
                    "typescript-sdk",
                    "1.32.2",
                    scenario,
                    setup,
                    transport=transport,
                    level=6,
                    server_level=6,
                )
                made.checklist = {"read": Check("yes", 1.0)}
                rows.append(made)
    kept = tmp_path / "history.sqlite3"
    CLIENT_HISTORY.record(rows, path=kept, when="2026-12-01T10:00:00Z")
    stub, base_url = stub_lab
    stub.matrix = CLIENT_HISTORY.matrix(kept)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{base_url}/#matrix")
    cell = page.locator('#matrix-rows td[data-scenario="single"]')
    expect(cell.locator('[data-transport="stdio"] .setup').first).to_have_text(
        "no tool · stdio: 6 re-read 1.32.2 · 2026-12-01"
    )
    expect(cell.locator('[data-transport="http"]')).to_have_count(2)
    expect(page.locator("#matrix-head th")).to_have_count(len(scenarios) + 1)
    right = page.evaluate(
        "Math.max(...[...document.querySelectorAll('#matrix th, #matrix td')]"
        ".map((n) => n.getBoundingClientRect().right))"
    )
    assert right <= 1280, f"the matrix runs to {right} px"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert errors == []
