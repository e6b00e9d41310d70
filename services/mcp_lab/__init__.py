"""mcp-subscribe-lab: does an MCP client handle resource subscriptions?"""
