"""The ``mcp-lab`` command line: parsing, commands, ``up`` and its embedded Redis."""
