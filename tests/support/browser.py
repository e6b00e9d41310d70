"""Headless Chromium (Debian's package) driven by Playwright, for the dashboard tests.

Never a downloaded browser: ``apt-get install chromium`` provides /usr/bin/chromium.
"""

from __future__ import annotations

from pathlib import Path

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the browser fixture reports it
    expect = sync_playwright = None  # type: ignore[assignment]

CHROMIUM = Path("/usr/bin/chromium")
# No sandbox (the tests run as root), no GPU, /dev/shm may be small, and nothing
# that phones home: the network is closed.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
WAIT_MS = 10_000  # upper bound of every wait in the browser


def missing() -> str | None:
    """Why no browser can run here, or None."""
    if sync_playwright is None:
        return "the playwright package is not installed (pip install playwright)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    return None
