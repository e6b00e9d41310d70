"""The MCP server process: sessions, subscriptions, the relay, and the HTTP routes."""
