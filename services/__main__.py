"""``python -m services``: the ``mcp-lab`` command line."""

from services.cli.entry import main

main()
