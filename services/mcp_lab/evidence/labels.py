"""Session labels: the one name a session has in every view of the lab.

An ``Mcp-Session-Id`` is the one secret a Streamable HTTP client holds: whoever
knows it can send requests, resume streams and end the session as that client.
The dashboard is readable by anyone who reaches the port (without a token), and an
exported report is attached to issues, so they name each session by a short label:
the first 10 hex digits of an HMAC (SHA-256) of the id under a secret. A label
cannot be turned back into the id.

**One secret per lab.** The secret is drawn once, by whoever first needs it, and kept
in the lab's Redis (``contract.LABEL_SECRET_KEY``), beside the evidence. Every view
labels under it, read from Redis when it is made: the dashboard and ``/api/report``
(each build), its downloads (one per report format) and pictures, ``mcp-lab report`` in
every format (:func:`lab_labels`), and the server's log line of a session's start
(``[initialize] ... label=<label>``). So a session has one label on every replica,
after a restart, in every export however often it is made, and an HTML report attached
to a bug matches the dashboard, the terminal report and the log line of that session.
The terminal report and ``mcp-lab report --format json``, read by whoever runs the
lab, show the id beside the label (the log names sessions by id).

**Without the lab's secret.** A report is only ever made from Redis (the evidence is
there), kept evidence included (``mcp-lab report --kept`` reads a copy of the lab's
Redis, which holds its secret): so every report the lab makes has its secret at hand.
A server that cannot reach Redis when it starts labels under a secret of its own
meanwhile, but it cannot build a report then either, and it takes the lab's secret at
its next build; its log lines carry no label until it has the lab's secret. A page
rendered from a report with no labels given (:func:`mcp_lab.evidence.html_report.to_html`
called without them) labels under a secret drawn for it alone, and says so in its
footer: its labels match no other view.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from redis.asyncio import Redis

from mcp_lab import contract

LABEL_HEX_DIGITS = 10

# What a labelled report's JSON says of its labels (``label_secret``).
OF_LAB = "lab"
OWN = "this export"


class SessionLabels:
    """Labels of session ids under a secret: the lab's (after :meth:`share`, or given
    with ``of_lab``), else one of this object's own."""

    def __init__(self, secret: bytes | None = None, *, of_lab: bool = False) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self._of_lab = of_lab and secret is not None

    async def share(self, redis: Redis) -> None:
        """Take the lab's secret from Redis (drawn now if none is kept yet): every
        replica, every export and ``mcp-lab report`` then label a session alike.
        Cheap enough to call before each report (one GET). Raises what Redis raises."""
        shared = await redis.get(contract.LABEL_SECRET_KEY)
        if shared is None:
            await redis.set(contract.LABEL_SECRET_KEY, secrets.token_hex(32), nx=True)
            shared = await redis.get(contract.LABEL_SECRET_KEY)
        text = shared.decode() if isinstance(shared, bytes) else str(shared)
        try:
            self._secret = bytes.fromhex(text)
        except ValueError:
            self._secret = text.encode()  # someone else's value: still a secret
        self._of_lab = True

    @property
    def secret(self) -> bytes:
        """The secret labels are made under (handed to the report worker,
        :mod:`mcp_lab.evidence.worker`, which labels alike)."""
        return self._secret

    @property
    def of_lab(self) -> bool:
        """Whether the secret is the lab's (so labels match every other view)."""
        return self._of_lab

    def __call__(self, session: str) -> str:
        digest = hmac.new(self._secret, session.encode(), hashlib.sha256).hexdigest()
        return digest[:LABEL_HEX_DIGITS]

    def public(self, report: dict[str, Any]) -> dict[str, Any]:
        """``report`` (the JSON of ``mcp_lab.evidence.report.to_json``) with every
        session id replaced by its label: ``best_session`` and each session's
        ``session`` (also given as ``best_label`` and ``label``, as ``mcp-lab report
        --format json`` has them beside the ids); ``label_secret`` says whose secret
        made them (:data:`OF_LAB` or :data:`OWN`)."""
        clients = []
        for client in report.get("clients", []):
            sessions = []
            for s in client["sessions"]:
                label = self(str(s["session"]))
                sessions.append({**s, "session": label, "label": label})
            best = client.get("best_session")
            best_label = None if best is None else self(str(best))
            clients.append(
                {
                    **client,
                    "best_session": best_label,
                    "best_label": best_label,
                    "sessions": sessions,
                }
            )
        return {**report, "label_secret": self.whose, "clients": clients}

    @property
    def whose(self) -> str:
        """``label_secret`` of a report labelled here."""
        return OF_LAB if self._of_lab else OWN


async def lab_labels(redis: Redis) -> SessionLabels:
    """The labels of the lab whose Redis ``redis`` is (its secret drawn now if it has
    none yet): what ``mcp-lab report`` names sessions by. Raises what Redis raises."""
    labels = SessionLabels()
    await labels.share(redis)
    return labels
