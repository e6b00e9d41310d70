"""``python -m mcp_lab``: the ``mcp-lab`` command line."""

from mcp_lab.cli.entry import main

main()
