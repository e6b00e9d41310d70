"""The ``mcp_lab`` pytest fixture, for a client's own test suite.

Installed with the lab (its ``pytest11`` entry point), it does nothing until a test asks
for ``mcp_lab``: then one lab starts for the test session (an embedded Redis, the server
and the updater on free loopback ports) and each test gets it reset. In a test::

    def test_my_client_re_reads_after_a_notification(mcp_lab):
        run_my_client(mcp_lab.url)               # or over stdio: mcp_lab.stdio_command
        verdict = mcp_lab.report("my-client")    # its clientInfo name
        assert verdict.level == 6, verdict.notes
        assert verdict.checklist["re_read"]

``mcp_lab.trigger()`` updates the resource for every subscribed session at once (the lab
also does so by itself one second after a subscribe); ``mcp_lab.reset()`` starts over.
The scenario is ``single`` unless ``--mcp-lab-scenario NAME`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mcp_lab.runners.clients.fixture_lab import FixtureLab


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--mcp-lab-scenario",
        default="single",
        help="the scenario the mcp_lab fixture's lab plays (mcp-lab scenarios lists them)",
    )


@pytest.fixture(scope="session")
def mcp_lab_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FixtureLab]:
    """The lab of the whole test session (started when a test first asks for it)."""
    # Imported here: the plugin loads with every pytest run and must cost nothing then.
    from mcp_lab.runners.clients import fixture_lab

    scenario = request.config.getoption("--mcp-lab-scenario")
    lab = fixture_lab.start(tmp_path_factory.mktemp("mcp-lab"), scenario)
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture
def mcp_lab(mcp_lab_session: FixtureLab) -> FixtureLab:
    """A running lab, reset for this test: ``.url``, ``.stdio_command``, ``.trigger()``,
    ``.reset()``, ``.report(client_name=None)``."""
    mcp_lab_session.reset()
    return mcp_lab_session
