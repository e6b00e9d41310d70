"""Base images for the Docker tests, so that ``dev.py test`` passes where Docker cannot pull.

The compose stack builds on ``PYTHON_IMAGE`` (default ``python:3.12-slim``) and runs
``REDIS_IMAGE`` (default ``redis:7-alpine``). When both are set, nothing is done. Else,
when a Docker engine answers, the images come from, in order: the public ones when they
are already local; the ones ``scripts/build-base-images.sh`` made earlier
(``mcp-lab/...``); that script run now, which pulls the public ones or, when they cannot
be pulled, builds local equivalents from the Debian mirror (as ``.ci/run`` does).

When none of that works, the Docker tests cannot run: outside CI they are skipped with
one line that names the command to run (:data:`UNUSABLE_ENV` carries the reason to the
tests); with ``CI=true`` nothing is skipped and those tests fail.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PUBLIC = {"PYTHON_IMAGE": "python:3.12-slim", "REDIS_IMAGE": "redis:7-alpine"}
LOCAL = {"PYTHON_IMAGE": "mcp-lab/python:3.11-bookworm", "REDIS_IMAGE": "mcp-lab/redis:7-bookworm"}
# Set for the tests when the Docker tests cannot run (its value says why).
UNUSABLE_ENV = "MCP_LAB_DOCKER_UNUSABLE"
SCRIPT = Path(__file__).resolve().parent.parent / "build-base-images.sh"
HOW_TO = (
    'eval "$(bash scripts/build-base-images.sh)"; export PYTHON_IMAGE REDIS_IMAGE '
    "(see docs/troubleshooting.md)"
)
_DOCKER_SECONDS = 10
_SCRIPT_SECONDS = 900
# A wait this long without a progress line of the script gets a line of its own.
_HEARTBEAT_SECONDS = 15.0


@dataclass(frozen=True)
class Outcome:
    """What :func:`prepare` decided: the variables to set, and one line to print."""

    env: dict[str, str]
    line: str | None


def _docker(*args: str) -> bool:
    try:
        done = subprocess.run(
            ["docker", *args], capture_output=True, timeout=_DOCKER_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def docker_answers() -> bool:
    return _docker("info", "--format", "{{.ServerVersion}}")


def image_is_local(image: str) -> bool:
    return _docker("image", "inspect", image)


def _local_set(is_local: Callable[[str], bool]) -> dict[str, str] | None:
    for images in (PUBLIC, LOCAL):
        if all(is_local(image) for image in images.values()):
            return dict(images)
    return None


def _run_script(
    script: Path, say: Callable[[str], None], heartbeat: float = _HEARTBEAT_SECONDS
) -> tuple[dict[str, str] | None, str]:
    """The images the script printed, or None and the last line of what it said. Its
    progress lines (``docker-setup: ...``) are passed on as they come, and a line every
    ``heartbeat`` seconds without one says it is still at work."""
    try:
        proc = subprocess.Popen(
            ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except OSError as exc:
        return None, str(exc)
    said: list[str] = []
    out: list[str] = []
    heard = threading.Event()

    def follow_progress() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.strip():
                said.append(line.strip())
            if line.startswith("docker-setup:"):
                say(f"dev: {line.strip()}")
                heard.set()

    def keep_output() -> None:
        assert proc.stdout is not None
        out.extend(proc.stdout)

    readers = [threading.Thread(target=f, daemon=True) for f in (follow_progress, keep_output)]
    for reader in readers:
        reader.start()
    with proc:  # its pipes closed once it is done with, whichever way it ends
        started = time.monotonic()
        while True:
            try:
                proc.wait(timeout=heartbeat)
                break
            except subprocess.TimeoutExpired:
                took = time.monotonic() - started
                if took > _SCRIPT_SECONDS:
                    proc.kill()
                    proc.wait()
                    return None, f"scripts/build-base-images.sh took over {_SCRIPT_SECONDS} s"
                if not heard.is_set():
                    say(f"dev: still making the base images ({took:.0f} s so far)")
                heard.clear()
        for reader in readers:
            reader.join(timeout=5)
        if proc.returncode == 0:
            images = dict(line.strip().split("=", 1) for line in out if "=" in line)
            if set(PUBLIC) <= set(images):
                return {name: images[name] for name in PUBLIC}, ""
    return None, said[-1] if said else f"exit code {proc.returncode}"


def prepare(
    environ: dict[str, str],
    *,
    answers: Callable[[], bool] = docker_answers,
    is_local: Callable[[str], bool] = image_is_local,
    script: Path = SCRIPT,
    say: Callable[[str], None] = print,
    heartbeat: float = _HEARTBEAT_SECONDS,
) -> Outcome:
    """The base images for the Docker tests (see the module's docstring)."""
    if all(environ.get(name) for name in PUBLIC):
        return Outcome({}, None)
    if not answers():
        return Outcome({}, None)  # the Docker tests skip (or fail under CI) by themselves
    found = _local_set(is_local)
    if found is None:
        say(
            "dev: the Docker tests need base images: pulling or building them with "
            "scripts/build-base-images.sh (once; 3 to 7 minutes where it must build them "
            "from the Debian mirror)"
        )
        found, why = _run_script(script, say, heartbeat)
        if found is None:
            in_ci = environ.get("CI", "").lower() == "true"
            reason = f"no base images for the Docker tests ({why}); to make them: {HOW_TO}"
            if in_ci:
                return Outcome({}, f"dev: CI=true and {reason}")
            return Outcome({UNUSABLE_ENV: reason}, f"dev: skipping the Docker tests: {reason}")
    chosen = {name: environ.get(name) or image for name, image in found.items()}
    if chosen == PUBLIC:
        return Outcome(chosen, None)
    shown = " ".join(f"{name}={image}" for name, image in chosen.items())
    return Outcome(chosen, f"dev: Docker tests use the local base images {shown}")


def prepare_for_tests(env: dict[str, str]) -> None:
    """:func:`prepare` applied to ``env`` (the tests' environment), its line printed."""
    outcome = prepare(env)
    env.update(outcome.env)
    if outcome.line:
        print(outcome.line, flush=True)
