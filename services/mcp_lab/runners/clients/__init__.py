"""``mcp-lab clients``: run real agent CLIs against the lab, offline, with a scripted model."""
