"""The benchmark's processes: the lab, the floor, and what they use of the machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
HOST = "127.0.0.1"
SESSION_ENDED = r"\[session/end\] closed"  # the server's log line for each ended session


class Proc:
    """A child process with its output collected, waitable for a line."""

    def __init__(self, name: str, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            with self._cond:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 30.0) -> None:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(regex.search(line) for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    tail = "\n".join(self.lines[-20:])
                    raise RuntimeError(f"{self.name}: no {pattern!r} in {timeout}s:\n{tail}")
                self._cond.wait(min(left, 0.5))

    def count(self, pattern: str) -> int:
        regex = re.compile(pattern)
        with self._cond:
            return sum(1 for line in self.lines if regex.search(line))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# Modules the lab's processes must not find (--without): a folder of stand-ins that
# raise ImportError, first on their PYTHONPATH, so "auto" choices fall back.
HIDDEN: list[str] = []


def _hiding_path() -> str:
    folder = Path(tempfile.gettempdir()) / f"mcp-lab-bench-without-{'-'.join(sorted(HIDDEN))}"
    for name in HIDDEN:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('{name} hidden by scripts/bench --without')\n"
        )
    return str(folder)


def lab_env(redis_url: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_TEST_")}
    env.update(REDIS_URL=redis_url, PYTHONUNBUFFERED="1", MCP_TEST_LOG_LEVEL="WARNING")
    env.update({f"MCP_TEST_{k.upper()}": v for k, v in settings.items()})
    if HIDDEN:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_hiding_path(), env.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    from mcp_lab.process.embedded_redis import free_port as free

    return free()


def start_lab(code: Path, redis_url: str, port: int, updater: bool, **settings: str) -> list[Proc]:
    """Server (and updater) of the lab in ``code``, ready to serve."""
    env = lab_env(redis_url, port=str(port), **settings)
    env["MCP_TEST_LOG_LEVEL"] = "INFO"  # the ready lines are INFO
    python = [sys.executable, "-m", "mcp_lab"]
    server = Proc("server", [*python, "server"], code, env)
    procs = [server]
    try:
        server.wait_for(r"\[lab\] server ready")
        if updater:
            procs.append(Proc("updater", [*python, "updater"], code, env))
            procs[-1].wait_for(r"\[updater\] ready")
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return procs


def start_floor(port: int, redis_url: str | None = None, delay: float = 0.0) -> Proc:
    command = [sys.executable, str(ROOT / "scripts" / "floor.py"), "--port", str(port)]
    if redis_url:
        command += ["--redis-url", redis_url]
    if delay:
        command += ["--delay", str(delay)]
    floor = Proc("floor", command, ROOT, dict(os.environ))
    floor.wait_for(r"floor ready")
    if redis_url:
        floor.wait_for(r"floor subscribed")
    return floor


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
