"""``cached``: every cacheable result carries a positive ``ttlMs`` (the lab's default is
0), so a 2026-07-28 client may keep its first read of the resource for a minute
(``server/utilities/caching.mdx``). The update comes well inside that minute: "a
notification invalidates a fresh entry", so after ``notifications/resources/updated``
the client must read from the wire again and see version 2, not serve version 1 from
its cache. The mcp Python SDK's ``Client`` caches reads by default and evicts the entry
on the notification (the probe is one).

From the wire the check sees only reads that reached the lab: a client that was notified
and never read again may have served its re-read from its cache, which the answer says.
"""

from __future__ import annotations

from mcp_lab.catalog import LAB_CATALOG, REVIEW_STATUS
from mcp_lab.contract import Event
from mcp_lab.scenarios import checks
from mcp_lab.scenarios.scenario import Check, Scenario

TTL_MS = 60_000
RE_READ = "read from the wire after the notification (version 2)"


def _checks(events: list[Event], uri: str) -> list[Check]:
    notes = checks.updates_after_subscribe(events, uri)[:1]
    if not notes:
        return [Check("wire_re_read", RE_READ, "no (not notified)")]
    (at,) = checks.rereads_after_each(events, uri, notes)
    if at is not None:
        return [Check("wire_re_read", RE_READ, "yes", at, True)]
    later = [r for r in checks.reads(events, uri) if r.ts_ms >= notes[0].ts_ms]
    if later:  # it read again, but got an older version than the one notified
        got = max(r.version or 0 for r in later)
        return [Check("wire_re_read", RE_READ, f"no (read version {got})", later[-1].ts_ms)]
    return [
        Check(
            "wire_re_read",
            RE_READ,
            f"no: a re-read may have been served from its cache (ttlMs {TTL_MS})",
        )
    ]


SCENARIO = Scenario(
    name="cached",
    summary=(
        f"reads carry ttlMs {TTL_MS} (a minute's cache): after the notification, does the "
        "client read from the wire again and see version 2, not its cached version 1?"
    ),
    catalog=LAB_CATALOG,
    watched=REVIEW_STATUS.uri,
    checks=_checks,
    cache_ttl_ms=TTL_MS,
    cache_scope="private",
)
