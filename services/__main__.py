"""``python -m services``: the ``mcp-lab`` command line."""

from services.cli.main import main

main()
