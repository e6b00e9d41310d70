"""Session labels: what the dashboard and ``/api/report`` show instead of session ids.

An ``Mcp-Session-Id`` is the one secret a Streamable HTTP client holds: whoever
knows it can send requests, resume streams and end the session as that client.
The dashboard is readable by anyone who reaches the port (without a token), so
it names each session by a short label: the first 10 hex digits of an HMAC
(SHA-256) of the id under a secret. A label cannot be turned back into the id.
The secret is drawn once and kept in Redis (``contract.LABEL_SECRET_KEY``), so
every replica, and a restarted server, gives a session the same label; a server
that cannot reach Redis when it starts uses a secret of its own meanwhile.
The log and ``mcp-lab report``, read by whoever runs the lab, keep the full ids.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from redis.asyncio import Redis

from services import contract

LABEL_HEX_DIGITS = 10


class SessionLabels:
    """Labels of session ids under this process's own secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    async def share(self, redis: Redis) -> None:
        """Take the lab's shared secret from Redis (drawn by the first server to
        ask): every replica then labels a session alike. Raises what Redis raises."""
        await redis.set(contract.LABEL_SECRET_KEY, secrets.token_hex(32), nx=True)
        shared = await redis.get(contract.LABEL_SECRET_KEY)
        text = shared.decode() if isinstance(shared, bytes) else str(shared)
        try:
            self._secret = bytes.fromhex(text)
        except ValueError:
            self._secret = text.encode()  # someone else's value: still a secret

    @property
    def secret(self) -> bytes:
        """The secret labels are made under (handed to the report worker,
        :mod:`services.evidence.worker`, which labels alike)."""
        return self._secret

    def __call__(self, session: str) -> str:
        digest = hmac.new(self._secret, session.encode(), hashlib.sha256).hexdigest()
        return digest[:LABEL_HEX_DIGITS]

    def public(self, report: dict[str, Any]) -> dict[str, Any]:
        """``report`` (the JSON of ``services.evidence.report.to_json``) with every
        session id replaced by its label: ``best_session`` and each session's ``session``."""
        clients = []
        for client in report.get("clients", []):
            sessions = [{**s, "session": self(str(s["session"]))} for s in client["sessions"]]
            best = client.get("best_session")
            clients.append(
                {
                    **client,
                    "best_session": None if best is None else self(str(best)),
                    "sessions": sessions,
                }
            )
        return {**report, "clients": clients}
