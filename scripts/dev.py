#!/usr/bin/env python3
"""Bootstrap and run the lab from a fresh clone: ``up`` runs it, ``test`` tests it.

Creates ``.venv`` and installs the project with its test extras on first use
(and again whenever pyproject.toml changes), then runs the command in it.

    python3 scripts/dev.py up      [mcp-lab up options]
    python3 scripts/dev.py test    [--quick] [pytest options]

``test`` runs the whole suite on parallel pytest-xdist workers (unless ``-n`` is
given, or ``REDIS_URL`` names one Redis server, whose pub/sub channels the workers
would share). ``--quick`` runs only the fast part: every test not marked
``process``, ``docker``, ``browser`` or ``clients``. Without ``--quick``, when a
Docker engine answers, the Docker tests get base images they can build on (local
ones where the public ones cannot be pulled; see scripts/devtools/docker_images.py).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

from devtools import docker_images, pip_output

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".mcp-lab-installed"


def _ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script runs on any python3
        sys.exit(f"mcp-subscribe-lab needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    started = time.monotonic()
    if not (BIN / "python").exists():
        print(
            f"dev: first run: creating {VENV} and installing the lab with its test tools "
            "(a minute or two)",
            flush=True,
        )
        venv.EnvBuilder(with_pip=True).create(VENV)
    else:
        print("dev: pyproject.toml changed: updating .venv (up to a minute)", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--quiet"]
    steps = [
        ([*pip, "--upgrade", "pip"], "upgrading pip"),
        ([*pip, "-e", f"{ROOT}[embedded,test]"], "installing mcp-subscribe-lab and its test tools"),
    ]
    for command, what in steps:
        print(f"dev: {what}", flush=True)
        code = pip_output.run(command, what)
        if code != 0:
            sys.exit(f"dev: pip failed ({what}, exit code {code}); see its output above")
    STAMP.write_text(wanted)
    print(f"dev: .venv ready in {time.monotonic() - started:.0f} s", flush=True)


QUICK_MARKERS = "not process and not docker and not browser and not clients"
# Workers for the full suite: each starts its own Redis and lab processes. One more
# than the cores: much of a process test is waiting on a lab or a client (on 2 cores,
# 3 workers ran the suite in 13 min 18 s, 2 workers in 16 min 34 s).
MAX_WORKERS = 4


def _run(command: list[str], env: dict[str, str] | None = None) -> int:
    return subprocess.run(command, cwd=ROOT, check=False, env=env).returncode


def _pytest_args(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The pytest arguments and environment for ``dev.py test args``."""
    env = dict(os.environ)
    if "--quick" in args:
        args = [a for a in args if a != "--quick"]
        args = ["-m", QUICK_MARKERS, *args]
        env["MCP_LAB_TEST_QUICK"] = "1"
    user_chose = any(a == "-n" or a.startswith(("-n=", "--numprocesses")) for a in args)
    if not user_chose and not env.get("REDIS_URL"):
        workers = max(1, min((os.cpu_count() or 1) + 1, MAX_WORKERS))
        args = ["-n", str(workers), "--dist", "loadfile", *args]
    return args, env


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(__doc__.strip())
        return 0
    if not argv or argv[0] not in ("up", "test"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    _ensure_venv()
    if argv[0] == "up":
        os.execv(str(BIN / "mcp-lab"), [str(BIN / "mcp-lab"), "up", *argv[1:]])
    # No cache: a stale one can hide what a clean clone (CI) reports.
    lint = _run([str(BIN / "ruff"), "check", "--no-cache", "services", "tests", "scripts",
                 "docs/examples"])  # fmt: skip
    if lint != 0:
        print("dev: ruff found problems (see above)", file=sys.stderr)
        return lint
    types = _run([str(BIN / "mypy")])  # what it checks: [tool.mypy] in pyproject.toml
    if types != 0:
        print("dev: mypy found problems (see above)", file=sys.stderr)
        return types
    args, env = _pytest_args(argv[1:])
    if "--quick" not in argv[1:]:
        docker_images.prepare_for_tests(env)
    return _run([str(BIN / "python"), "-m", "pytest", *args], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
