"""Host and Origin, read as a host and a port: who may reach the server from a browser.

A page on another site must not talk to the lab through the user's browser (DNS
rebinding, cross-site requests), as the MCP spec requires:

* ``Host`` must be ``name`` or ``name:port`` (``[v6]`` or ``[v6]:port``) with a
  port of digits, and the name a loopback name or address, the address the
  server is bound to (when it is a specific one), or one of
  ``MCP_TEST_ALLOWED_HOSTS`` (shell patterns such as ``*.lab.internal``; an
  entry with a port matches that port only). Anything else gets 421.
  (``127.0.0.1:8089.evil.example`` is the name ``127.0.0.1`` with the port
  ``8089.evil.example``: refused, not read as loopback.)
* ``Origin``, when a browser sends one, must be an origin (``scheme://host[:port]``,
  nothing more) that is one of ``MCP_TEST_ALLOWED_ORIGINS``, or the server's own:
  the origin of the ``Host`` the request was sent to, or a loopback host on the
  server's own port. Another port on this machine is another site (another
  program's page). Anything else gets 403.

Each refusal is logged (at most every ``_LOG_SECONDS`` per kind, with a count).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fnmatch import fnmatchcase
from ipaddress import ip_address
from urllib.parse import urlsplit

from services import untrusted
from services.logs import Throttled

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

    def host_allowed(self, host: str, bound_to: str | None) -> bool:
        """Whether a request's ``Host`` names this server (``bound_to``: the address
        the server is bound to, as the request's scope says)."""
        authority = parse_authority(host)
        if authority is None:
            return self._refused_host(host)
        name = authority.host
        if is_loopback(name) or (bound_to and not _is_unspecified(bound_to) and name == bound_to):
            return True
        for allowed in self._hosts:
            if fnmatchcase(name, allowed.host) and allowed.port in (None, authority.port):
                return True
        return self._refused_host(host)

    def origin_allowed(self, origin: str, host: str, scheme: str, server_port: int | None) -> bool:
        """Whether a browser's ``Origin`` is the server's own or an allowed one."""
        parsed = parse_origin(origin)
        if parsed is None:
            return self._refused_origin(origin)
        normal = _normal(parsed)
        if "*" in self._origins or any(fnmatchcase(normal, o) for o in self._origins_normal):
            return True
        target = parse_authority(host)
        if target is not None and normal == _normal(Origin(scheme, target)):
            return True  # the origin of the address the request was sent to
        if is_loopback(parsed.authority.host) and parsed.port == server_port:
            return True
        return self._refused_origin(origin)

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
