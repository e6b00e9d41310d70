"""The benchmark of the lab under load (``python scripts/bench``), one phase a module."""
