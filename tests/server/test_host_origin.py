"""Host and Origin name what the lab serves: its host and its port, and for Origin its
scheme (services/mcp_lab/server/host_origin.py). The rules alone, with the address and port
a connection came in on as uvicorn gives them (``scope["server"]``); the guard that
answers 421/403/400 is tested through the app in tests/server/test_security.py."""

from __future__ import annotations

import pytest

from mcp_lab.server.host_origin import HostOrigin

ON_LOOPBACK = ("127.0.0.1", 8089)
IN_A_CONTAINER = ("172.18.0.3", 8089)  # reached through a published port, e.g. 18089


@pytest.mark.parametrize(
    ("host", "server", "allowed"),
    [
        ("127.0.0.1:8089", ON_LOOPBACK, True),
        ("localhost:8089", ON_LOOPBACK, True),
        ("[::1]:8089", ON_LOOPBACK, True),
        ("127.0.0.1:18089", ON_LOOPBACK, False),  # a loopback address, another port
        ("localhost", ON_LOOPBACK, False),  # no port is http's 80
        ("localhost", ("127.0.0.1", 80), True),
        ("localhost:80", ("127.0.0.1", None), True),  # no port in the scope: the default
        # Through a port forward (Docker's published port): the port is the forward's.
        ("127.0.0.1:18089", IN_A_CONTAINER, True),
        ("localhost:18089", IN_A_CONTAINER, True),
        ("172.18.0.3:8089", IN_A_CONTAINER, True),  # the address it came in on, its port
        ("172.18.0.3:18089", IN_A_CONTAINER, False),
        ("evil.example:18089", IN_A_CONTAINER, False),
        ("evil.example:8089", ON_LOOPBACK, False),
        ("127.0.0.1:8089", ("::ffff:127.0.0.1", 8089), True),  # a dual-stack socket
        ("127.0.0.1:18089", ("::ffff:127.0.0.1", 8089), False),
        ("127.0.0.1:18089", None, True),  # nothing known of the connection: the name only
        ("evil.example", None, False),
    ],
)
def test_host_names_the_servers_host_and_port(
    host: str, server: tuple[str, int | None] | None, allowed: bool
) -> None:
    assert HostOrigin("", "").host_allowed(host, server, "http") is allowed


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("lab.internal", True),
        ("lab.internal:443", True),  # an entry without a port: any port
        ("api.lab.internal:9", True),
        ("lab.internal.evil.example", False),
        ("localhost:18089", True),  # an entry with a port: that port
        ("localhost:18090", False),
        ("127.0.0.1:18089", False),  # another name than the entry's
        ("proxy.example", True),  # entry proxy.example:80, Host without a port (80)
        ("proxy.example:8080", False),
    ],
)
def test_allowed_hosts_entries_match_their_port_or_any(host: str, allowed: bool) -> None:
    rules = HostOrigin("lab.internal,*.lab.internal,localhost:18089,proxy.example:80", "")
    assert rules.host_allowed(host, ON_LOOPBACK, "http") is allowed


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("http://127.0.0.1:8089", "127.0.0.1:8089", True),
        ("http://localhost:8089", "127.0.0.1:8089", True),  # another loopback spelling
        ("http://[::1]:8089", "localhost:8089", True),
        ("https://127.0.0.1:8089", "127.0.0.1:8089", False),  # the lab serves http
        ("http://localhost:3000", "localhost:8089", False),  # another program's page
        ("http://localhost", "localhost:8089", False),  # port 80
        ("http://localhost:18089", "localhost:18089", True),  # a published port's page
        ("http://lab.internal:8089", "lab.internal:8089", True),
        ("http://localhost:8089", "lab.internal:8089", False),  # not the Host's name
        ("http://lab.internal", "lab.internal", True),
        ("http://lab.internal:80", "lab.internal", True),
        ("https://lab.internal", "lab.internal", False),
    ],
)
def test_origin_is_the_scheme_host_and_port_the_request_went_to(
    origin: str, host: str, allowed: bool
) -> None:
    assert HostOrigin("lab.internal", "").origin_allowed(origin, host, "http") is allowed


def test_an_https_server_takes_its_https_origin_and_allowed_origins_pass_as_listed() -> None:
    rules = HostOrigin("", "https://ui.example,http://localhost:3000")
    assert rules.origin_allowed("https://127.0.0.1:8443", "127.0.0.1:8443", "https")
    assert not rules.origin_allowed("http://127.0.0.1:8443", "127.0.0.1:8443", "https")
    assert rules.origin_allowed("https://ui.example", "127.0.0.1:8089", "http")
    assert rules.origin_allowed("http://localhost:3000", "127.0.0.1:8089", "http")
    assert not rules.origin_allowed("https://ui.example:8443", "127.0.0.1:8089", "http")
