"""Whether the tests run in CI (``CI=true``): there a missing part is a failure, never a skip."""

from __future__ import annotations

import os

IN_CI = os.environ.get("CI", "").lower() == "true"
