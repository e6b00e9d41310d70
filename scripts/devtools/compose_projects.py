"""Names of the compose projects the tests and benchmarks start, and their leftovers.

A run killed before its ``docker compose down`` leaves its stack behind, and the
stack's ``restart: unless-stopped`` starts it again whenever the Docker engine
starts: six containers nobody uses, health-checked every 2 s, under every later
test and benchmark (one such stack ran for an hour here before anyone saw it).

So each project is named after the process that started it,
``mcp-lab-<kind>-<pid>-<8 hex>``, and :func:`remove_leftovers`, called before a new
stack starts, takes down (containers, volumes, the images built for it) every
project of that form whose process no longer runs on this host. A project of a
process that still runs (another test run beside this one) is never touched.

A project's images are removed by :func:`remove_images`, which keeps their
untagged parent layers: another stack being built at the same moment (the Docker
tests run side by side) may be using them as its build cache, and the legacy
builder fails with "unknown parent image ID" when one goes from under it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterable

from mcp_lab.cli.runtime import process_exists

_NAME = re.compile(r"^mcp-lab-[a-z]+-(?P<pid>\d+)-[0-9a-f]{8}$")
_TIMEOUT_SECONDS = 180


def project_name(kind: str) -> str:
    """A project name of this process's own (``kind``: test, scale, bench...)."""
    return f"mcp-lab-{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def leftovers(projects: Iterable[str]) -> list[str]:
    """The projects named by :func:`project_name` whose process is gone."""
    gone = []
    for name in projects:
        match = _NAME.match(name)
        if match and not process_exists(int(match["pid"])):
            gone.append(name)
    return sorted(gone)


def projects() -> list[str]:
    """Every compose project with a container on this engine, running or not."""
    listed = subprocess.run(
        ["docker", "compose", "ls", "--all", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [str(project["Name"]) for project in json.loads(listed or "[]")]


def remove_images(project: str) -> None:
    """Remove the images built for ``project`` (``<project>-<service>``), keeping
    their parent layers (see the module's docstring). Never raises."""
    try:
        # By name, never by id: an id may also carry another name (a base image).
        listing = ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"]
        found = subprocess.run(
            [*listing, "--filter", f"reference={project}-*"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
        if found:
            subprocess.run(
                ["docker", "image", "rm", "--no-prune", *sorted(set(found))],
                capture_output=True,
                timeout=_TIMEOUT_SECONDS,
                check=False,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"compose_projects: could not remove the images of {project}: {exc}")


def remove_leftovers() -> list[str]:
    """Take down the projects of runs that are gone (see the module's docstring);
    their names. A failure to list or remove is printed, never raised: a new
    stack can still start beside a leftover."""
    try:
        found = leftovers(projects())
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"compose_projects: could not list compose projects: {exc}")
        return []
    for name in found:
        down = ["docker", "compose", "-p", name, "down", "--volumes", "--remove-orphans"]
        try:
            subprocess.run(
                [*down, "--timeout", "5"],
                capture_output=True,
                timeout=_TIMEOUT_SECONDS,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"compose_projects: could not remove the leftover project {name}: {exc}")
            continue
        remove_images(name)
        print(f"compose_projects: removed the leftover project {name} (its run is gone)")
    return found
