"""Host and Origin, read as a host and a port: who may reach the server from a browser.

A page on another site must not talk to the lab through the user's browser (DNS
rebinding, cross-site requests), as the MCP spec requires. Both must name what
the lab serves, its host and its port:

* ``Host`` must be ``name`` or ``name:port`` (``[v6]`` or ``[v6]:port``) with a
  port of digits (none: the scheme's default, 80 for http), and either
  - one of ``MCP_TEST_ALLOWED_HOSTS`` (shell patterns such as ``*.lab.internal``;
    an entry with a port matches that port only, one without any port: a proxy
    in front may serve the lab on a port of its own); or
  - a loopback name or address (``localhost``, ``127.0.0.1``, ``[::1]``...) or the
    address the connection came in on, with the port the server listens on
    (the connection's own port: ``scope["server"]``). One exception: a loopback
    name on a connection that came in on another address came through a port
    forward (a container's published port, as in docker compose, whose port the
    server cannot see), and is taken on any port; a browser on this machine
    reaches a loopback address directly, so for it the port is exact.
  Anything else gets 421. (``127.0.0.1:8089.evil.example`` is the name
  ``127.0.0.1`` with the port ``8089.evil.example``: refused, not read as loopback.)
* ``Origin``, when a browser sends one, must be an origin (``scheme://host[:port]``,
  nothing more) that is one of ``MCP_TEST_ALLOWED_ORIGINS``, or the server's own:
  the scheme it serves (``http``; ``https://`` is another site), and the host and
  port of the ``Host`` the request was sent to, or another loopback name on that
  port when that is a loopback one. Another port on this machine is another site
  (another program's page). Anything else gets 403.

A request with two ``Host`` or two ``Origin`` headers is refused with 400 by the
guard (:class:`mcp_lab.server.guard.HostOriginCheck`): layers that read the first
and layers that read the last would disagree on who it is for.

Each refusal is logged (at most every ``_LOG_SECONDS`` per kind, with a count).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fnmatch import fnmatchcase
from ipaddress import ip_address
from urllib.parse import urlsplit

from mcp_lab import untrusted
from mcp_lab.logs import Throttled

logger = logging.getLogger("mcp_lab.guard")

LOOPBACK_NAMES = frozenset({"localhost"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOG_SECONDS = 10.0
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_")


@dataclass(frozen=True)
class Authority:
    """A host name (lower case, an IPv6 address without brackets) and maybe a port."""

    host: str
    port: int | None = None


def parse_authority(value: str) -> Authority | None:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; None when it is anything else."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[1:end], value[end + 1 :]
        if end < 0 or not _is_ip(host) or ":" not in host:
            return None
    else:
        host, colon, port_text = value.partition(":")
        rest = f":{port_text}" if colon else ""
        if not host or not set(host) <= _NAME_CHARS:
            return None
    if not rest:
        return Authority(host)
    port_text = rest[1:]
    if not rest.startswith(":") or not port_text.isdigit() or len(port_text) > 5:
        return None
    port = int(port_text)
    return Authority(host, port) if 0 < port < 65536 else None


def _is_ip(text: str) -> bool:
    try:
        ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _is_unspecified(host: str) -> bool:
    try:
        return ip_address(host).is_unspecified
    except ValueError:
        return not host


def _arrived_on_loopback(local: str) -> bool:
    """Whether a connection came in on a loopback address (``local``, its own end;
    an IPv4 address mapped into IPv6, as a dual-stack socket gives it, counts)."""
    try:
        address = ip_address(local)
    except ValueError:
        return is_loopback(local.lower())  # a name, as an in-memory transport gives it
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


@dataclass(frozen=True)
class Origin:
    scheme: str
    authority: Authority

    @property
    def port(self) -> int | None:
        return self.authority.port or _DEFAULT_PORTS.get(self.scheme)


def parse_origin(value: str) -> Origin | None:
    """``scheme://host[:port]`` (an ``http`` or ``https`` origin and nothing more), or None."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or parts.path not in ("", "/") or parts.query:
        return None
    if parts.fragment or "@" in parts.netloc:
        return None
    authority = parse_authority(parts.netloc)
    return None if authority is None else Origin(scheme, authority)


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


class HostOrigin:
    """The Host and Origin rules above, for one server's allow-lists."""

    def __init__(self, allowed_hosts: str, allowed_origins: str) -> None:
        self._hosts = [parse_authority(h) or Authority(h.lower()) for h in _split(allowed_hosts)]
        self._origins = _split(allowed_origins)
        self._origins_normal = [
            _normal(o) for o in (parse_origin(v) for v in self._origins) if o is not None
        ]
        self._bad_host = Throttled(logger, _LOG_SECONDS)
        self._bad_origin = Throttled(logger, _LOG_SECONDS)
        self._twice = Throttled(logger, _LOG_SECONDS)

    def host_allowed(
        self, host: str, server: tuple[str, int | None] | None, scheme: str = "http"
    ) -> bool:
        """Whether a request's ``Host`` names this server. ``server``: the address and
        port the connection came in on (the request's ``scope["server"]``; None when
        unknown: then the port is not checked); ``scheme``: the request's."""
        authority = parse_authority(host)
        if authority is None:
            return self._refused_host(host)
        name = authority.host
        port = authority.port or _DEFAULT_PORTS.get(scheme)
        for allowed in self._hosts:
            if fnmatchcase(name, allowed.host) and allowed.port in (None, port):
                return True
        if server is None:
            local, own_port = None, None
        else:
            local, own_port = server[0], server[1] or _DEFAULT_PORTS.get(scheme)
        loopback = is_loopback(name)
        if not loopback and not (local and not _is_unspecified(local) and name == local):
            return self._refused_host(host)
        if own_port is None or port == own_port:
            return True
        if loopback and local and not _arrived_on_loopback(local):
            return True  # through a port forward (a published container port): its port
        return self._refused_host(host)

    def origin_allowed(self, origin: str, host: str, scheme: str) -> bool:
        """Whether a browser's ``Origin`` is the server's own (``scheme``, the host and
        port of ``host``, the request's ``Host``, which passed) or an allowed one."""
        parsed = parse_origin(origin)
        if parsed is None:
            return self._refused_origin(origin)
        normal = _normal(parsed)
        if "*" in self._origins or any(fnmatchcase(normal, o) for o in self._origins_normal):
            return True
        target = parse_authority(host)
        if target is not None and parsed.scheme == scheme:
            served = Origin(scheme, target)
            if normal == _normal(served):
                return True  # the origin of the address the request was sent to
            if (
                is_loopback(parsed.authority.host)
                and is_loopback(target.host)
                and parsed.port == served.port
            ):
                return True  # another loopback name for the same address and port
        return self._refused_origin(origin)

    def refused_twice(self, header: str) -> None:
        """Log a request with two ``header`` headers (400)."""
        self._twice.warning("[guard] a request with two %s headers refused (400)", header)

    def _refused_host(self, host: str) -> bool:
        self._bad_host.warning("[guard] Host %s refused (421)", untrusted.shown(host, 100))
        return False

    def _refused_origin(self, origin: str) -> bool:
        self._bad_origin.warning("[guard] Origin %s refused (403)", untrusted.shown(origin, 100))
        return False


def _normal(origin: Origin) -> str:
    host = origin.authority.host
    shown = f"[{host}]" if ":" in host else host
    return f"{origin.scheme}://{shown}:{origin.port}"
