"""The updaters' take-over, shortened for the tests: its timings, its log line and the
pending jobs by consumer (read by the in-process and the process tests alike)."""

from __future__ import annotations

from mcp_lab import contract

# Shortened: a killed updater's heartbeat expires at most HEARTBEAT s after its last
# refresh; the survivor looks for stranded jobs every TAKE_OVER_EVERY s (and reads
# new jobs for no longer than that in between).
HEARTBEAT = "2"


TAKE_OVER_EVERY = "0.5"


CHECK = r"\[updater\] take-over check: {holders} other consumer\(s\) with pending jobs, {dead} "


def pending_by_consumer(redis_client) -> dict[str, int]:
    summary = redis_client.xpending(contract.JOBS_STREAM, contract.JOBS_GROUP)
    return {c["name"]: c["pending"] for c in summary["consumers"]}
