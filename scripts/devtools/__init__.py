"""Helpers of ``scripts/dev.py`` (standard library only: they run before ``.venv`` exists)."""
