"""A stock FastMCP server with the lab's resource but no subscribe support, for the probe tests.

python -m tests.support.servers.no_subscribe PORT
"""

from __future__ import annotations

import sys

import uvicorn
from fastmcp import FastMCP

server = FastMCP("no-subscribe")


@server.resource("test://review/status", mime_type="text/plain")
def status() -> str:
    return "status: pending\nversion: 1\nmessage: this server never changes"


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(server.http_app(path="/mcp"), host="127.0.0.1", port=port, log_level="info")
