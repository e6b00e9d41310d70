"""The runner-side descriptions of the tests' own programs: the fake agent CLI
(fake_agent.py) and the fake bridge (fake_bridge.py), as a runner sees any client or
bridge; and a fake client's released versions, installed as npm would leave them."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from mcp_lab.runners.bridges.specs import LOCAL, BridgeSpec, Ends, Launch, direction
from mcp_lab.runners.clients.definition import ClientDef, parse

HERE = Path(__file__).resolve().parent
FAKE_AGENT = HERE / "fake_agent.py"  # a small agent CLI (the SDK and the scripted model)
FAKE_BRIDGE = HERE / "fake_bridge.py"  # an HTTP->HTTP bridge that can drop updates

NAME, PACKAGE, BINARY = "fake-sweep", "fake-sweep-agent", "fake-sweep"
VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"]
CHANGES_AT = "1.3.0"  # reads only when its model asks before; subscribes and pushes from it


def install_fakes(cache: Path) -> None:
    """Every version in the cache as ``npm install`` would leave it, its binary a
    wrapper that runs the fake agent with that version's behaviour."""
    for version in VERSIONS:
        prefix = cache / f"{NAME}-{version}"
        binary = prefix / "node_modules" / ".bin" / BINARY
        binary.parent.mkdir(parents=True)
        behaviour = "push" if version >= CHANGES_AT else "pull-only"
        argv = [sys.executable, str(FAKE_AGENT), "--agent-version", version]
        argv += ["--behaviour", behaviour]
        binary.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
        binary.chmod(0o755)
        (prefix / ".mcp-lab-installed").write_text(f"{PACKAGE}@{version}\n")


def fake_npm(bin_dir: Path, calls: Path) -> None:
    """An ``npm`` that knows the package's versions and its latest, and nothing else."""
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {shlex.quote(str(calls))}\n'
        'case "$*" in\n'
        f"  'view {PACKAGE} versions --json') echo '{json.dumps(VERSIONS)}' ;;\n"
        f"  'view {PACKAGE}@latest version') echo '{VERSIONS[-1]}' ;;\n"
        '  *) echo "fake npm: no network here ($*)" >&2; exit 1 ;;\n'
        "esac\n"
    )
    npm.chmod(0o755)


def fake_agent(
    behaviour: str, *, name: str | None = None, version: str = "0.1.0", model: str = "{model_url}"
) -> ClientDef:
    """The fake agent (fake_agent.py) with ``behaviour``, as a client file describes it:
    a command of this Python, over http or stdio, speaking Chat Completions."""
    argv = ["{binary}", str(FAKE_AGENT), "--mcp", "{url}", "--model", model]
    argv += ["--behaviour", behaviour, "--agent-version", version]
    return parse(
        {
            "name": name or f"fake-{behaviour}",
            "title": "fake agent",
            "kind": "cli",
            "client_info": "fake-agent",
            "transports": ["http", "stdio"],
            "install": {"command": sys.executable, "version": version},
            "model": {"api": "openai-chat"},
            "run": {"argv": [*argv, "{prompt}"], "continue": [*argv, "--continue", "{prompt}"]},
        },
        __file__,
    )


def sweep_agent(pinned: str = VERSIONS[0]) -> ClientDef:
    """The sweep's fake client, pinned at ``pinned``: an npm package whose every version
    is installed by :func:`install_fakes` (its binary runs the fake agent of that
    version)."""
    argv = ["{binary}", "--mcp", "{url}", "--model", "{model_url}"]
    return parse(
        {
            "name": NAME,
            "title": "fake agent",
            "kind": "cli",
            "client_info": "fake-agent",
            "install": {"npm": PACKAGE, "version": pinned, "binary": BINARY},
            "model": {"api": "openai-chat"},
            "run": {"argv": [*argv, "{prompt}"], "continue": [*argv, "--continue", "{prompt}"]},
        },
        __file__,
    )


def _bridge_invocation(ends: Ends) -> Launch:
    argv = [*ends.program, "--port", str(ends.port), "--upstream", str(ends.lab_url)]
    return Launch(argv, "/mcp")


def bridge(name: str) -> BridgeSpec:
    """The fake bridge as the runner sees any bridge (HTTP->HTTP)."""
    return BridgeSpec(name, "a fake bridge (tests/support/fake_bridge.py)", LOCAL, None, "0",
                      "python", (direction("HTTP->HTTP"),),
                      launch=_bridge_invocation)  # fmt: skip
