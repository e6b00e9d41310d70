"""Whether the tests run in CI (``CI=true``): there a missing part is a failure, never a skip."""

from __future__ import annotations

import os

IN_CI = os.environ.get("CI", "").lower() == "true"


class SuiteNotice(UserWarning):
    """What the suite says without failing (warnings are errors otherwise,
    pyproject.toml): a test that left processes running (killed after it), or Redis
    from a local redis-server because Docker's container did not start."""
