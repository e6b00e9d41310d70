"""Whether the Docker tests can run here, and skipping them (failing under CI=true) when
they cannot."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.ci import IN_CI


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
