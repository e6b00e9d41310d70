"""Leftover compose stacks of runs that are gone (scripts/devtools/compose_projects.py):
taken down before a new stack starts; a stack of a run still going is left alone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scripts.devtools import compose_projects
from tests.support.docker_engine import skip_unless_docker_is_usable
from tests.support.docker_redis import REDIS_IMAGE

skip_unless_docker_is_usable()
pytestmark = pytest.mark.docker

COMPOSE = """services:
  idle:
    image: {image}
    command: ["redis-server", "--port", "0"]
    restart: unless-stopped
"""


def gone_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def listed() -> set[str]:
    return set(compose_projects.projects())


def up(name: str, compose_file: Path) -> None:
    subprocess.run(
        ["docker", "compose", "-p", name, "-f", str(compose_file), "up", "-d"],
        capture_output=True,
        timeout=120,
        check=True,
    )


def test_a_gone_runs_stack_is_taken_down_and_a_running_ones_is_not(tmp_path: Path) -> None:
    compose_file = tmp_path / "compose.yml"
    image = REDIS_IMAGE
    compose_file.write_text(COMPOSE.format(image=image))
    left = f"mcp-lab-test-{gone_pid()}-0123abcd"
    mine = compose_projects.project_name("test")
    try:
        up(left, compose_file)
        up(mine, compose_file)
        assert {left, mine} <= listed()
        assert left in compose_projects.remove_leftovers()
        still = listed()
        assert left not in still and mine in still
    finally:
        for name in (left, mine):
            subprocess.run(
                ["docker", "compose", "-p", name, "down", "--volumes", "--timeout", "1"],
                capture_output=True,
                timeout=120,
                check=False,
            )


def test_a_projects_images_go_by_name_and_a_base_image_they_share_stays() -> None:
    """An image built for a project may be a base image under another name (nothing
    changed in its build): only the project's names go, never the image by id."""
    project = compose_projects.project_name("test")
    names = [f"{project}-server:latest", f"{project}-updater:latest"]
    for name in names:
        subprocess.run(["docker", "tag", REDIS_IMAGE, name], timeout=60, check=True)
    compose_projects.remove_images(project)
    images = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert not set(names) & set(images)
    assert REDIS_IMAGE in images or f"{REDIS_IMAGE}:latest" in images
