#!/usr/bin/env python3
"""Bootstrap and run the lab from a fresh clone: ``up`` runs it, ``test`` tests it.

Creates ``.venv`` and installs the project with its test extras on first use
(and again whenever pyproject.toml changes), then runs the command in it.

    python3 scripts/dev.py up      [mcp-lab up options]
    python3 scripts/dev.py test    [pytest options]
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

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
    if not (BIN / "python").exists():
        print(f"dev: creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("dev: installing mcp-subscribe-lab and its test tools into .venv", flush=True)
    subprocess.run(
        [str(BIN / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True
    )
    subprocess.run(
        [str(BIN / "python"), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[embedded,test]"],
        check=True,
    )
    STAMP.write_text(wanted)


def _run(command: list[str]) -> int:
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("up", "test"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    _ensure_venv()
    if argv[0] == "up":
        os.execv(str(BIN / "mcp-lab"), [str(BIN / "mcp-lab"), "up", *argv[1:]])
    lint = _run([str(BIN / "ruff"), "check", "services", "tests", "scripts"])
    if lint != 0:
        print("dev: ruff found problems (see above)", file=sys.stderr)
        return lint
    return _run([str(BIN / "python"), "-m", "pytest", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
