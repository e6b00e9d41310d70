"""``scripts/dev.py``: its help, the install's progress, and the Docker tests' base images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts.devtools import docker_images, pip_output
from tests.support.lab import ROOT

# What ``pip install -e .`` printed on this project (setuptools 80), around the box.
PIP_OUTPUT = """\
WARNING: Location 'file:///opt/pypi/simple/pip/' is ignored: it is neither a file nor a directory.
  /tmp/pip-build-env-4u/overlay/lib/python3.11/site-packages/setuptools/command/editable_wheel.py:354: BuildBackendWarning: Editable installation.
  !!

          ********************************************************************************
          Please be careful with folders in your working directory with the same
          name as your package as they may take precedence during imports.
          ********************************************************************************

  !!
    with strategy, WheelFile(wheel_path, "w") as wheel_obj:
ERROR: a real problem stays
"""  # noqa: E501


def test_dev_help_exits_0_and_a_wrong_command_2() -> None:
    for args, code in ((["--help"], 0), (["-h"], 0), (["nope"], 2), ([], 2)):
        result = subprocess.run(
            [sys.executable, "scripts/dev.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == code, (args, result.stderr)
        assert "python3 scripts/dev.py up" in result.stdout + result.stderr


def test_the_editable_install_warning_box_is_left_out_and_nothing_else() -> None:
    kept = list(pip_output.without_editable_warning(PIP_OUTPUT.splitlines(keepends=True)))
    assert kept == [
        PIP_OUTPUT.splitlines(keepends=True)[0],
        "ERROR: a real problem stays\n",
    ]


def test_a_long_install_says_it_is_still_running(capfd: pytest.CaptureFixture[str]) -> None:
    # A stand-in for pip: a job that takes a second and prints the warning box.
    job = f"import sys, time; sys.stderr.write({PIP_OUTPUT!r}); time.sleep(1)"
    code = pip_output.run([sys.executable, "-c", job], "installing", every=0.2)
    out, err = capfd.readouterr()
    assert code == 0
    assert "dev: still installing (" in out
    assert "Editable installation" not in err and "a real problem stays" in err


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "build-base-images.sh"
    script.write_text(f"#!/usr/bin/env bash\n{body}\n")
    return script


def _prepare(environ: dict[str, str], local: set[str], script: Path) -> docker_images.Outcome:
    return docker_images.prepare(
        environ, answers=lambda: True, is_local=local.__contains__, script=script, say=print
    )


NO_SCRIPT = Path("/nonexistent/build-base-images.sh")


def test_base_images_named_by_the_user_are_kept() -> None:
    environ = {"PYTHON_IMAGE": "mine/python", "REDIS_IMAGE": "mine/redis"}
    assert _prepare(environ, set(), NO_SCRIPT) == docker_images.Outcome({}, None)


def test_without_an_engine_nothing_is_decided_here() -> None:
    outcome = docker_images.prepare(
        {}, answers=lambda: False, is_local=lambda _: True, script=NO_SCRIPT
    )
    assert outcome == docker_images.Outcome({}, None)


def test_local_images_come_first_public_then_built_ones() -> None:
    public = set(docker_images.PUBLIC.values())
    local = set(docker_images.LOCAL.values())
    assert _prepare({}, public | local, NO_SCRIPT).env == docker_images.PUBLIC
    outcome = _prepare({}, local, NO_SCRIPT)
    assert outcome.env == docker_images.LOCAL
    assert outcome.line is not None and "mcp-lab/python:3.11-bookworm" in outcome.line


def test_without_local_images_the_script_pulls_or_builds_them(tmp_path: Path) -> None:
    script = _script(
        tmp_path, "echo progress >&2; echo PYTHON_IMAGE=b/python; echo REDIS_IMAGE=b/redis"
    )
    outcome = _prepare({}, set(), script)
    assert outcome.env == {"PYTHON_IMAGE": "b/python", "REDIS_IMAGE": "b/redis"}


def test_the_scripts_progress_is_passed_on_and_a_quiet_wait_still_says_something(
    tmp_path: Path,
) -> None:
    body = (
        "echo 'docker-setup: building mcp-lab/debian:bookworm' >&2; sleep 0.6; "
        "echo PYTHON_IMAGE=b/python; echo REDIS_IMAGE=b/redis"
    )
    lines: list[str] = []
    outcome = docker_images.prepare(
        {},
        answers=lambda: True,
        is_local=lambda _: False,
        script=_script(tmp_path, body),
        say=lines.append,
        heartbeat=0.2,
    )
    assert outcome.env == {"PYTHON_IMAGE": "b/python", "REDIS_IMAGE": "b/redis"}
    assert "dev: docker-setup: building mcp-lab/debian:bookworm" in lines
    assert any(line.startswith("dev: still making the base images (") for line in lines), lines


def test_when_no_image_can_be_had_the_docker_tests_skip_with_one_line(tmp_path: Path) -> None:
    script = _script(tmp_path, "echo 'docker-setup: mmdebstrap failed' >&2; exit 1")
    outcome = _prepare({}, set(), script)
    reason = outcome.env[docker_images.UNUSABLE_ENV]
    assert "mmdebstrap failed" in reason and "build-base-images.sh" in reason
    assert outcome.line is not None and "\n" not in outcome.line
    assert outcome.line.startswith("dev: skipping the Docker tests")


def test_under_ci_nothing_is_skipped(tmp_path: Path) -> None:
    script = _script(tmp_path, "exit 1")
    outcome = _prepare({"CI": "true"}, set(), script)
    assert docker_images.UNUSABLE_ENV not in outcome.env
    assert outcome.line is not None and outcome.line.startswith("dev: CI=true and")
