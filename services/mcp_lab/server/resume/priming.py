"""Which clients get priming events: SSE events with an id and no data.

The 2025-11-25 revision introduced them (an id to resume from before any
message). Older clients parse every event's data as JSON, and some (the
TypeScript SDK before 1.23, bundled in Gemini CLI) treat an empty one as a
broken server; they never get one from the lab.
"""

from __future__ import annotations

from mcp_types.version import is_version_at_least

FIRST_PRIMED_PROTOCOL = "2025-11-25"


def takes_priming(protocol: str | None) -> bool:
    """Whether a client that negotiated ``protocol`` may be sent data-less events."""
    return protocol is not None and is_version_at_least(protocol, FIRST_PRIMED_PROTOCOL)
