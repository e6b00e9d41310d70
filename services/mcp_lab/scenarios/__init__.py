"""The scenarios the lab can play: one file each (see scenario.py and registry.py)."""
