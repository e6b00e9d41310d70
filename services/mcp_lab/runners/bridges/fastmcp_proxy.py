"""FastMCP's own proxy as a bridge: ``python -m mcp_lab.runners.bridges.fastmcp_proxy``.

``fastmcp.server.create_proxy(target)`` (fastmcp 4 has no ``FastMCP.as_proxy``) in front
of the lab's Streamable HTTP URL (``--url``) or of a stdio server (``-- CMD ARGS``),
served over stdio, Streamable HTTP (``/mcp``) or legacy SSE (``/sse``) on ``--port``:
the way a user puts a FastMCP proxy between a client and a server.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

FRONTS = ("stdio", "http", "sse")


def _target(url: str | None, command: list[str]) -> Any:
    if url is not None:
        return url
    server: dict[str, Any] = {"command": command[0], "args": command[1:], "env": dict(os.environ)}
    return {"mcpServers": {"lab": server}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_lab.runners.bridges.fastmcp_proxy")
    parser.add_argument("--front", choices=FRONTS, required=True, help="what the client speaks")
    parser.add_argument("--port", type=int, default=None, help="the HTTP or SSE front's port")
    parser.add_argument("--url", default=None, help="the server's Streamable HTTP URL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS: a stdio server")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if (args.url is None) == (not command):
        parser.error("give the server as --url URL or as -- CMD ARGS (one of them)")
    if args.front != "stdio" and args.port is None:
        parser.error(f"--front {args.front} needs --port")
    from fastmcp.server import create_proxy

    proxy = create_proxy(_target(args.url, command), name="fastmcp-proxy")
    if args.front == "stdio":
        proxy.run(transport="stdio", show_banner=False)
    else:
        proxy.run(transport=args.front, show_banner=False, host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
