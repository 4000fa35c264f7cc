"""A Streamable HTTP MCP server built with the SDK, for the tests: 127.0.0.1 only.

    python http_server.py PORT TOKEN

Every request must carry ``Authorization: Bearer TOKEN`` (401 otherwise), so a test sees
the configured headers arrive. Tools: add(a, b), whoami() (the Authorization it received).
"""
from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

PORT, TOKEN = int(sys.argv[1]), sys.argv[2]
server = MCPServer("lily-test-http")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def guarded(app):
    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)
    return asgi


if __name__ == "__main__":
    uvicorn.run(guarded(server.streamable_http_app()), host="127.0.0.1", port=PORT,
                log_level="warning", lifespan="on")
