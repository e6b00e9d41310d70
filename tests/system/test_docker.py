"""The deployed shape: the compose stack (redis + server + updater) through testcontainers.

Needs a Docker engine with ``docker compose`` v2. Outside CI these tests skip
with the reason when no engine answers; with ``CI=true`` they must run.
Images: ``PYTHON_IMAGE`` and ``REDIS_IMAGE`` (public defaults; see
scripts/build-base-images.sh for machines without a registry).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import anyio
import pytest

from mcp_lab import contract
from mcp_lab.process.embedded_redis import free_port
from scripts.devtools import compose_projects
from tests.support.docker_engine import skip_unless_docker_is_usable
from tests.support.lab import ROOT, STATUS_URI, connect, version_of

# Building the images on a fresh machine takes a minute or two on top of the test.
pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.timeout(900)]

# Long enough that the restart test kills the updater before the job is due.
DELAY = 6.0
BOUND = 20.0

skip_unless_docker_is_usable()

from testcontainers.compose import DockerCompose  # noqa: E402


def wait_until(check, timeout: float, what: str, every: float = 0.2):
    """Poll ``check`` until it returns something truthy; bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[DockerCompose, str]]:
    """The compose stack on a free loopback port, under a project name of its own."""
    port = free_port()
    saved = dict(os.environ)
    compose_projects.remove_leftovers()
    project = compose_projects.project_name("test")
    os.environ.update(
        {
            "COMPOSE_PROJECT_NAME": project,
            "MCP_LAB_HTTP_PORT": str(port),
            "MCP_TEST_UPDATE_DELAY_SECONDS": str(DELAY),
            "DOCKER_BUILDKIT": "0",
        }
    )
    compose = DockerCompose(ROOT, compose_file_name="docker-compose.yml", build=True, wait=True)
    try:
        with compose:
            yield compose, f"http://127.0.0.1:{port}/mcp"
            started = time.monotonic()
        print(f"docker compose down took {time.monotonic() - started:.1f}s")
    finally:
        os.environ.clear()
        os.environ.update(saved)
        # The images built for this project only; the base images stay.
        compose_projects.remove_images(project)


def redis_cli(compose: DockerCompose, *args: str) -> str:
    """redis-cli inside the redis container, as a person would run it."""
    stdout, stderr, code = compose.exec_in_container(["redis-cli", *args], service_name="redis")
    assert code == 0, stderr
    return stdout.strip()


def test_redis_fixture_uses_a_container(redis_endpoint) -> None:
    if os.environ.get("REDIS_URL"):
        pytest.skip("REDIS_URL is set, so the tests use that Redis")
    assert redis_endpoint.kind == "testcontainers"


def test_every_service_is_healthy_and_only_loopback_is_published(stack) -> None:
    compose, _ = stack
    containers = {c.Service: c for c in compose.get_containers()}
    assert set(containers) == {"redis", "server", "updater"}
    for name, container in containers.items():
        assert container.Health == "healthy", f"{name}: {container.Health}"
    published = [p for p in containers["server"].Publishers or [] if p.PublishedPort]
    assert published and all(p.URL == "127.0.0.1" for p in published)
    assert not [p for p in containers["redis"].Publishers or [] if p.PublishedPort]


async def test_full_flow_and_a_manual_publish_through_the_stack(stack) -> None:
    compose, url = stack
    async with connect(url, "compose-client") as client:
        listed = await client.session.list_resources()
        assert [str(r.uri) for r in listed.resources] == [STATUS_URI]
        assert version_of(await client.read_text()) == 1
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=DELAY + BOUND)
        assert version_of(await client.read_text()) == 2

        receivers = await anyio.to_thread.run_sync(
            lambda: redis_cli(compose, "publish", "mcp:resources:updated", STATUS_URI)
        )
        assert receivers == "1"
        await client.wait_updated(2, timeout=BOUND)
    logs, _ = compose.get_logs("server")
    assert "[notification/send] notifications/resources/updated" in logs
    assert "client=compose-client/1.0" in logs


async def test_updater_restarted_during_the_delay_still_delivers_once(stack) -> None:
    compose, url = stack
    async with connect(url, "restart-client") as client:
        await client.session.subscribe_resource(STATUS_URI)
        # The updater has taken the job (it is pending in the group) and waits out the delay.
        await anyio.to_thread.run_sync(
            lambda: wait_until(
                lambda: (
                    redis_cli(
                        compose, "XPENDING", contract.JOBS_STREAM, contract.JOBS_GROUP
                    ).splitlines()[0:1]
                    == ["1"]
                ),
                timeout=10,
                what="the updater to take the job",
            )
        )
        await anyio.to_thread.run_sync(lambda: compose_cli("kill", "updater"))
        await anyio.to_thread.run_sync(lambda: compose_cli("start", "updater"))

        await client.wait_updated(1, timeout=DELAY + BOUND)
        assert version_of(await client.read_text()) == 2
        await anyio.to_thread.run_sync(
            lambda: wait_until(
                lambda: redis_cli(compose, "XLEN", contract.JOBS_STREAM) == "0",
                timeout=10,
                what="the job to leave the stream",
            )
        )
        await client.session.send_ping()
        assert client.updated == [STATUS_URI]
    logs, _ = compose.get_logs("updater")
    assert "(recovered)" in logs


def compose_cli(*args: str) -> None:
    """``docker compose`` on the test's project (named by COMPOSE_PROJECT_NAME)."""
    command = ["docker", "compose", "-f", "docker-compose.yml", *args]
    subprocess.run(command, cwd=ROOT, check=True, timeout=120, capture_output=True)


def restarts(compose: DockerCompose, service: str) -> int:
    container_id = compose.get_container(service).ID
    result = subprocess.run(
        ["docker", "inspect", "--format", "{{.RestartCount}}", container_id],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(result.stdout.strip())


def health(compose: DockerCompose, service: str) -> str:
    return compose.get_container(service).Health or "none"


def redis_outage_and_recovery(compose: DockerCompose) -> None:
    """Stop Redis until server and updater report unhealthy, start it, and see both
    healthy again with no container restarted (blocking: docker commands, polls)."""
    before = {s: restarts(compose, s) for s in ("server", "updater")}
    compose_cli("stop", "redis")
    try:
        for service in ("server", "updater"):
            wait_until(
                lambda s=service: health(compose, s) == "unhealthy",
                timeout=60,
                what=f"{service} to report unhealthy",
                every=1,
            )
    finally:
        compose_cli("start", "redis")
    for service in ("server", "updater"):
        try:
            wait_until(
                lambda s=service: health(compose, s) == "healthy",
                timeout=60,
                what=f"{service} to be healthy again",
                every=1,
            )
        except AssertionError:
            logs, _ = compose.get_logs(service)
            raise AssertionError(
                f"{service} stayed unhealthy; its last log lines:\n"
                + "\n".join(logs.splitlines()[-30:])
            ) from None
    assert {s: restarts(compose, s) for s in ("server", "updater")} == before
    logs, _ = compose.get_logs("server", "updater")
    assert "[relay] redis unavailable" in logs
    assert "[updater] redis unavailable" in logs
    assert "Traceback" not in logs


async def test_stack_reports_a_redis_outage_and_recovers_without_restarts(stack) -> None:
    compose, url = stack
    await anyio.to_thread.run_sync(lambda: redis_outage_and_recovery(compose))

    async with connect(url, "after-outage") as client:
        await client.session.subscribe_resource(STATUS_URI)
        await client.wait_updated(1, timeout=DELAY + BOUND)
        assert version_of(await client.read_text()) == 2
