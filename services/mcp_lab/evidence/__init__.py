"""The evidence pipeline: recording what happened, and reading, scoring and reporting it."""
