"""``mcp-lab bridges``: resource subscriptions through bridges and gateways."""
