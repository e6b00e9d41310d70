"""docker-compose.yml passes every setting of LabSettings to the containers.

No Docker needed: the file is read as YAML. The list of settings comes from
``LabSettings``, so a new setting that is not added to compose fails here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from mcp_lab.settings import LabSettings, env_name
from tests.support.lab import ROOT

# Settings the containers fix on purpose, with the value they must have.
FIXED_IN_CONTAINERS = {
    "MCP_TEST_HOST": "0.0.0.0",  # binds every interface of the container; published on loopback
    "REDIS_URL": "redis://redis:6379/0",  # the compose redis service
}
# ${NAME:-default} (default when unset or empty) or ${NAME-default} (when unset).
PASS_THROUGH = re.compile(r"^\$\{(?P<name>[A-Z_][A-Z0-9_]*)(?::?-)(?P<default>[^}]*)\}$")
LAB_SERVICES = ("server", "updater")


def service_environments() -> dict[str, dict[str, str]]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {
        name: {key: str(value) for key, value in compose["services"][name]["environment"].items()}
        for name in LAB_SERVICES
    }


@pytest.mark.parametrize("service", LAB_SERVICES)
def test_every_setting_reaches_the_container(service: str) -> None:
    environment = service_environments()[service]
    missing = sorted(
        env_name(f) for f in LabSettings.model_fields if env_name(f) not in environment
    )
    assert not missing, f"docker-compose.yml does not pass {missing} to {service}"
    for field in LabSettings.model_fields:
        name = env_name(field)
        value = environment[name]
        if name in FIXED_IN_CONTAINERS:
            assert value == FIXED_IN_CONTAINERS[name], (service, name, value)
            continue
        match = PASS_THROUGH.match(value)
        assert match and match["name"] == name, (
            f"{service}: {name}: {value!r} does not pass the user's {name} through"
        )


def test_compose_defaults_are_the_lab_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With nothing set (no .env), the containers get LabSettings' own defaults."""
    for key in list(os.environ):
        if key.startswith("MCP_TEST_") or key == "REDIS_URL":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no .env here
    lab_defaults = LabSettings().model_dump()
    for service, environment in service_environments().items():
        with monkeypatch.context() as env:
            for name, value in environment.items():
                match = PASS_THROUGH.match(value)
                env.setenv(name, match["default"] if match else value)
            in_container = LabSettings().model_dump()
        fixed = {f for f in LabSettings.model_fields if env_name(f) in FIXED_IN_CONTAINERS}
        differing = {
            field: (in_container[field], lab_defaults[field])
            for field in LabSettings.model_fields
            if field not in fixed and in_container[field] != lab_defaults[field]
        }
        assert not differing, f"{service}: compose default != lab default: {differing}"


def test_the_published_port_follows_the_server_port() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    (published,) = compose["services"]["server"]["ports"]
    assert published.startswith("127.0.0.1:"), published  # loopback only
    assert published.endswith(":${MCP_TEST_PORT:-8089}"), published


def test_the_scale_profile_puts_the_balancer_on_the_published_port() -> None:
    """``--profile scale`` adds the balancer on the port the server has without it;
    ``MCP_LAB_SERVER_PORT=0`` moves the replicas off it (docs/usage.md "Several replicas")."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["balancer"]["profiles"] == ["scale"]
    assert all("profiles" not in services[name] for name in ("redis", "server", "updater"))
    (server_port,) = services["server"]["ports"]
    (balancer_port,) = services["balancer"]["ports"]
    default = "${MCP_LAB_HTTP_PORT:-${MCP_TEST_PORT:-8089}}"
    assert server_port.startswith("127.0.0.1:${MCP_LAB_SERVER_PORT:-" + default + "}:")
    assert balancer_port == f"127.0.0.1:{default}:8089"


def test_every_variable_of_the_balancer_config_is_set_by_compose() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    environment = compose["services"]["balancer"]["environment"]
    used = set(re.findall(r"\$\{(\w+)\}", (ROOT / "deploy" / "haproxy.cfg").read_text()))
    assert used and used <= set(environment), sorted(used - set(environment))
    assert environment["LAB_SERVER_PORT"] == "${MCP_TEST_PORT:-8089}"
    assert environment["LAB_MCP_PATH"] == "${MCP_TEST_PATH:-/mcp}"


def test_the_compose_redis_is_bounded_by_the_same_settings() -> None:
    """The compose Redis runs with the maxmemory and client output-buffer limit of the
    settings (their defaults), as the embedded one does."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = " ".join(compose["services"]["redis"]["command"])
    defaults = LabSettings.model_fields
    maxmemory = defaults["redis_maxmemory"].default
    buffers = defaults["redis_client_buffer_limit"].default
    assert f"--maxmemory ${{MCP_TEST_REDIS_MAXMEMORY:-{maxmemory}}}" in command, command
    assert "--maxmemory-policy noeviction" in command, command
    assert (
        "--client-output-buffer-limit normal "
        f"${{MCP_TEST_REDIS_CLIENT_BUFFER_LIMIT:-{buffers}}} 0 0" in command
    ), command


def test_the_readme_says_how_compose_builds_without_a_registry() -> None:
    """`docker compose up --build` alone fails at once where no registry answers: the
    README gives the step that makes the base images, beside it, not a link away."""
    text = (ROOT / "README.md").read_text()
    at = text.index("docker compose up --build")
    nearby = text[at : at + 600]
    assert 'eval "$(bash scripts/build-base-images.sh)"' in nearby, nearby
