"""The live dashboard of a real lab, in a real headless Chromium, while a client works."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

from tests.support.browser import ARTIFACTS, expect
from tests.support.lab import STATUS_URI, connect

BOUND = 10.0


class ClientFlow(threading.Thread):
    """The ideal client flow in a thread, pausing before the re-read until told to go on."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__(daemon=True)
        self.url, self.name = url, name
        self.subscribed = threading.Event()
        self.go_on = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._flow())
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    async def _flow(self) -> None:
        async with connect(self.url, self.name) as client:
            await client.session.list_resources()
            await client.read_text()
            await client.session.subscribe_resource(STATUS_URI)
            self.subscribed.set()
            await client.wait_updated(1, timeout=BOUND)
            assert await asyncio.to_thread(self.go_on.wait, BOUND), "test never said go on"
            await client.read_text()

    def wait(self, event: threading.Event, what: str) -> None:
        assert event.wait(BOUND), f"client flow: no {what} within {BOUND}s ({self.error!r})"
        assert self.error is None, self.error


def test_dashboard_shows_a_client_reach_level_6_live(lab, page, errors) -> None:
    server, mcp_url = lab.server(update_delay_seconds="1")
    lab.updater(update_delay_seconds="1")
    base = mcp_url.removesuffix("/mcp")

    page.goto(f"{base}/")
    expect(page).to_have_title("mcp-subscribe-lab")
    expect(page.locator("#status")).to_have_text("live")
    loaded_at = page.evaluate("window.__loadedAt")
    row = page.locator('#client-rows tr[data-client="dashboard-client/1.0"]')

    flow = ClientFlow(mcp_url, "dashboard-client")
    flow.start()
    flow.wait(flow.subscribed, "subscribe")
    expect(row).to_be_visible()
    # The update comes a second after the subscribe; the page follows without a reload.
    expect(row).to_have_attribute("data-level", "5")
    expect(row.get_by_test_id("level")).to_contain_text("notified")
    flow.go_on.set()
    flow.wait(flow.done, "end of the flow")
    expect(row).to_have_attribute("data-level", "6")
    expect(row.get_by_test_id("level")).to_contain_text("re-read")

    assert page.evaluate("window.__loadedAt") == loaded_at, "the page was reloaded"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-live.png"), full_page=True)
    assert errors == []
    server.wait_for(r"\[resources/read\] uri=test://review/status version=2 .*dashboard-client")


def test_healthz_reports_redis_and_relay(lab) -> None:
    _, mcp_url = lab.server()
    with urllib.request.urlopen(mcp_url.removesuffix("/mcp") + "/healthz", timeout=5) as reply:
        body = reply.read().decode()
    assert '"redis":"ok"' in body and '"relay":"subscribed"' in body
    # The store probe's outages so far: none.
    assert '"redis_outages":0' in body and '"redis_down_seconds":0' in body, body


def test_dashboard_with_a_token_opens_from_its_link_and_drops_the_token(lab, page, errors) -> None:
    """``/?token=`` opens the page; its data comes with the cookie the page set (the
    token in the query opens nothing else), and the token leaves the address bar."""
    _, mcp_url = lab.server(auth_token="s3cret")
    base = mcp_url.removesuffix("/mcp")
    page.goto(f"{base}/?token=s3cret")
    expect(page.locator("#status")).to_have_text("live")
    expect(page.locator("#run-id")).not_to_have_text("—")  # the first report arrived
    assert "token" not in page.url
    assert errors == []
