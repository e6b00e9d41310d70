"""The command line every built-in bridge is started with, in each of its directions and
on each version tests/runners/bridges/test_versions.py uses (and its pin), pinned as it
was when bridges were Python code in specs.py: the bridge files must start each one the
same, byte for byte, and give the same "not supported" reasons."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mcp_lab.runners.bridges.definition import PATHS
from mcp_lab.runners.bridges.specs import BRIDGES, Ends, direction

PROGRAM = ["prog", "x y"]  # the installed bridge (two words: both must come through)
# The lab's stdio server: a space and a quote, for the shell-quoted forms.
LAB = ["mcp-lab", "server", "--transport", "stdio", "--log", "/tmp/a b/it's.log"]
TESTED = ("", "0.0.22", "0.1.18", "0.15.1", "2.8.3", "2.14.3", "3.0.1", "3.2.0", "3.3.0",
          "3.4.0", "4.0.0", "5.12.5", "6.7.19")  # fmt: skip
PINS = {"mcp-remote": "0.15.1", "supergateway": "4.0.0", "supergateway-stateless": "4.0.0",
        "mcp-proxy": "6.7.19", "mcp-proxy-py": "0.13.0", "fastmcp-proxy": "4.2.3",
        "mcp-hub": "4.2.1"}  # fmt: skip
REST = "every other version"
# versions (or REST), argv ({folder}: the run's folder), client path, ready line, prefix
Expected = tuple[tuple[str, ...] | str, list[str], str | None, str | None, str]

LAUNCHES: dict[tuple[str, str], list[Expected]] = {
    ("fastmcp-proxy", "stdio->HTTP"): [
        (REST, [*PROGRAM, "--front", "stdio", "--url", "http://127.0.0.1:9/mcp"], None, None, ""),
    ],
    ("fastmcp-proxy", "HTTP->HTTP"): [
        (
            REST,
            [*PROGRAM, "--front", "http", "--port", "8080", "--url", "http://127.0.0.1:9/mcp"],
            "/mcp",
            None,
            "",
        ),
    ],
    ("fastmcp-proxy", "SSE->HTTP"): [
        (
            REST,
            [*PROGRAM, "--front", "sse", "--port", "8080", "--url", "http://127.0.0.1:9/mcp"],
            "/sse",
            None,
            "",
        ),
    ],
    ("fastmcp-proxy", "HTTP->stdio"): [
        (
            REST,
            [
                *PROGRAM,
                "--front",
                "http",
                "--port",
                "8080",
                "--",
                "mcp-lab",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/mcp",
            None,
            "",
        ),
    ],
    ("mcp-hub", "SSE->HTTP"): [
        (
            REST,
            [*PROGRAM, "--port", "8080", "--config", "{folder}/mcp-hub.json"],
            "/mcp",
            "'lab' MCP server connected",
            "lab__",
        ),
    ],
    ("mcp-hub", "SSE->stdio"): [
        (
            REST,
            [*PROGRAM, "--port", "8080", "--config", "{folder}/mcp-hub.json"],
            "/mcp",
            "'lab' MCP server connected",
            "lab__",
        ),
    ],
    ("mcp-proxy", "HTTP->stdio"): [
        (
            ("5.12.5",),
            [
                *PROGRAM,
                "--port",
                "8080",
                "--host",
                "127.0.0.1",
                "--server",
                "stream",
                "mcp-lab",
                "--",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/mcp",
            None,
            "",
        ),
        (
            ("", "6.7.19"),
            [
                *PROGRAM,
                "--port",
                "8080",
                "--host",
                "127.0.0.1",
                "--server",
                "stream",
                "--",
                "mcp-lab",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/mcp",
            None,
            "",
        ),
        (
            REST,
            [
                *PROGRAM,
                "--port",
                "8080",
                "--server",
                "stream",
                "--shell",
                "mcp-lab server --transport stdio --log '/tmp/a b/it'\"'\"'s.log'",
            ],
            "/stream",
            None,
            "",
        ),
    ],
    ("mcp-proxy", "SSE->stdio"): [
        (
            ("5.12.5",),
            [
                *PROGRAM,
                "--port",
                "8080",
                "--host",
                "127.0.0.1",
                "--server",
                "sse",
                "mcp-lab",
                "--",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/sse",
            None,
            "",
        ),
        (
            ("", "6.7.19"),
            [
                *PROGRAM,
                "--port",
                "8080",
                "--host",
                "127.0.0.1",
                "--server",
                "sse",
                "--",
                "mcp-lab",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/sse",
            None,
            "",
        ),
        (
            REST,
            [
                *PROGRAM,
                "--port",
                "8080",
                "--server",
                "sse",
                "--shell",
                "mcp-lab server --transport stdio --log '/tmp/a b/it'\"'\"'s.log'",
            ],
            "/sse",
            None,
            "",
        ),
    ],
    ("mcp-proxy-py", "stdio->HTTP"): [
        (
            REST,
            [*PROGRAM, "--transport", "streamablehttp", "http://127.0.0.1:9/mcp"],
            None,
            None,
            "",
        ),
    ],
    ("mcp-proxy-py", "stdio->SSE"): [
        (REST, [*PROGRAM, "--transport", "sse", "http://127.0.0.1:9/sse"], None, None, ""),
    ],
    ("mcp-proxy-py", "HTTP->stdio"): [
        (
            REST,
            [
                *PROGRAM,
                "--port",
                "8080",
                "--host",
                "127.0.0.1",
                "--pass-environment",
                "--",
                "mcp-lab",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/mcp",
            None,
            "",
        ),
    ],
    ("mcp-proxy-py", "SSE->stdio"): [
        (
            REST,
            [
                *PROGRAM,
                "--port",
                "8080",
                "--host",
                "127.0.0.1",
                "--pass-environment",
                "--",
                "mcp-lab",
                "server",
                "--transport",
                "stdio",
                "--log",
                "/tmp/a b/it's.log",
            ],
            "/sse",
            None,
            "",
        ),
    ],
    ("mcp-remote", "stdio->HTTP"): [
        (("0.0.22",), [*PROGRAM, "http://127.0.0.1:9/mcp"], None, None, ""),
        (REST, [*PROGRAM, "http://127.0.0.1:9/mcp", "--transport", "http-only"], None, None, ""),
    ],
    ("mcp-remote", "stdio->SSE"): [
        (("0.0.22",), [*PROGRAM, "http://127.0.0.1:9/sse"], None, None, ""),
        (REST, [*PROGRAM, "http://127.0.0.1:9/sse", "--transport", "sse-only"], None, None, ""),
    ],
    ("supergateway", "stdio->HTTP"): [
        (REST, [*PROGRAM, "--streamableHttp", "http://127.0.0.1:9/mcp"], None, None, ""),
    ],
    ("supergateway", "stdio->SSE"): [
        (REST, [*PROGRAM, "--sse", "http://127.0.0.1:9/sse"], None, None, ""),
    ],
    ("supergateway", "HTTP->stdio"): [
        (
            REST,
            [
                *PROGRAM,
                "--stdio",
                "mcp-lab server --transport stdio --log '/tmp/a b/it'\"'\"'s.log'",
                "--port",
                "8080",
                "--outputTransport",
                "streamableHttp",
                "--stateful",
            ],
            "/mcp",
            None,
            "",
        ),
    ],
    ("supergateway", "SSE->stdio"): [
        (
            REST,
            [
                *PROGRAM,
                "--stdio",
                "mcp-lab server --transport stdio --log '/tmp/a b/it'\"'\"'s.log'",
                "--port",
                "8080",
            ],
            "/sse",
            None,
            "",
        ),
    ],
    ("supergateway-stateless", "HTTP->stdio"): [
        (
            REST,
            [
                *PROGRAM,
                "--stdio",
                "mcp-lab server --transport stdio --log '/tmp/a b/it'\"'\"'s.log'",
                "--port",
                "8080",
                "--outputTransport",
                "streamableHttp",
            ],
            "/mcp",
            None,
            "",
        ),
    ],
}
PROXY_WHY = (
    "mcp-proxy {v} cannot pass options to the server it runs (no '--', no --shell), so it "
    "cannot start mcp-lab server --transport stdio (3.2 can)"
)
UNSUPPORTED: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("mcp-proxy", "HTTP->stdio"): (
        ("0.0.22", "0.1.18", "0.15.1", "2.8.3", "2.14.3", "3.0.1"),
        PROXY_WHY,
    ),
    ("mcp-proxy", "SSE->stdio"): (
        ("0.0.22", "0.1.18", "0.15.1", "2.8.3", "2.14.3", "3.0.1"),
        PROXY_WHY,
    ),
    ("mcp-remote", "stdio->HTTP"): (
        ("0.0.22",),
        "mcp-remote {v} speaks SSE only (--transport http-only came in 0.1.0)",
    ),
    ("supergateway", "stdio->HTTP"): (
        ("0.0.22", "0.1.18", "0.15.1", "2.8.3", "2.14.3"),
        "supergateway {v} has no --streamableHttp (it came in 3.0)",
    ),
    ("supergateway", "HTTP->stdio"): (
        ("0.0.22", "0.1.18", "0.15.1", "2.8.3", "2.14.3", "3.0.1", "3.2.0", "3.3.0"),
        "supergateway {v} serves no Streamable HTTP (--outputTransport streamableHttp came in 3.4)",
    ),
    ("supergateway-stateless", "HTTP->stdio"): (
        ("0.0.22", "0.1.18", "0.15.1", "2.8.3", "2.14.3", "3.0.1", "3.2.0", "3.3.0"),
        "supergateway {v} serves no Streamable HTTP (--outputTransport streamableHttp came in 3.4)",
    ),
}


def ends(way: str, version: str, folder: Path) -> Ends:
    d = direction(way)
    url = None if d.lab == "stdio" else f"http://127.0.0.1:9/{PATHS[d.lab].lstrip('/')}"
    command = LAB if d.lab == "stdio" else None
    port = 8080 if d.client != "stdio" else None
    return Ends(PROGRAM, d, url, command, port, folder, folder / "home", version)


def expected(bridge: str, way: str, version: str) -> Expected:
    groups = LAUNCHES[(bridge, way)]
    return next(g for g in groups if g[0] == REST or version in g[0])


def test_every_built_in_direction_is_pinned() -> None:
    built_in = {(name, d.name) for name, spec in BRIDGES.items() for d in spec.directions}
    assert built_in == set(LAUNCHES)
    assert set(PINS) == set(BRIDGES)


@pytest.mark.parametrize(("bridge", "way"), list(LAUNCHES))
def test_each_version_is_started_as_before(bridge: str, way: str, tmp_path: Path) -> None:
    spec = BRIDGES[bridge]
    assert spec.launch is not None
    for version in sorted({*TESTED, PINS[bridge]}):
        started = spec.launch(ends(way, version, tmp_path))
        _, argv, path, ready, prefix = expected(bridge, way, version)
        argv = [a.replace("{folder}", str(tmp_path)) for a in argv]
        assert started.argv == argv, version
        assert (started.client_path, started.ready, started.prefix) == (path, ready, prefix)
        versions, reason = UNSUPPORTED.get((bridge, way), ((), ""))
        why = reason.replace("{v}", version) if version in versions else None
        assert spec.why_not(version, direction(way)) == why, version


HUB_CONFIG = {
    "SSE->HTTP": {"url": "http://127.0.0.1:9/mcp"},
    "SSE->stdio": {"command": LAB[0], "args": LAB[1:]},
}


@pytest.mark.parametrize("way", list(HUB_CONFIG))
def test_mcp_hub_gets_its_config_and_a_fresh_catalog(way: str, tmp_path: Path) -> None:
    spec = BRIDGES["mcp-hub"]
    assert spec.launch is not None
    before = int(time.time() * 1000)
    spec.launch(ends(way, "4.2.1", tmp_path))
    config = (tmp_path / "mcp-hub.json").read_text()
    assert config == json.dumps({"mcpServers": {"lab": HUB_CONFIG[way]}}, indent=2) + "\n"
    catalog = tmp_path / "home" / ".local" / "share" / "mcp-hub" / "cache" / "registry.json"
    written = json.loads(catalog.read_text())
    placeholder = {"id": "none", "name": "none", "description": "offline"}
    assert written["registry"] == {"servers": [placeholder]}
    assert isinstance(written["lastFetchedAt"], int)
    assert before <= written["lastFetchedAt"] <= int(time.time() * 1000)


def test_each_bridge_installs_as_before() -> None:
    """Source, package, binary and shared install (fastmcp-proxy: the installed one)."""
    found = {name: (s.source, s.package, s.binary, s.install_name) for name, s in BRIDGES.items()}
    assert found == {
        "mcp-remote": ("npm", "mcp-remote", "mcp-remote", None),
        "supergateway": ("npm", "supergateway", "supergateway", None),
        "supergateway-stateless": ("npm", "supergateway", "supergateway", "supergateway"),
        "mcp-proxy": ("npm", "mcp-proxy", "mcp-proxy", None),
        "mcp-proxy-py": ("pypi", "mcp-proxy", "mcp-proxy", None),
        "fastmcp-proxy": ("fastmcp", "fastmcp", "python", None),
        "mcp-hub": ("npm", "mcp-hub", "mcp-hub", None),
    }
    pinned = {name: spec.version for name, spec in BRIDGES.items() if name != "fastmcp-proxy"}
    assert pinned == {name: v for name, v in PINS.items() if name != "fastmcp-proxy"}
    assert list(BRIDGES) == list(PINS)  # the order of the matrix
