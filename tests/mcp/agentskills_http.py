"""agentskills-mcp-server's own CLI (``python -m agentskills_mcp_server``) over Streamable HTTP
on a port the test chooses: ``agentskills_http.py PORT --config server.json``.

Run with the Python of ``.venv-skills`` (``make skills-venv``), never Lily's: the CLI binds
127.0.0.1:8000 and has no option for the port, so this passes ``port=`` to the SDK's
``MCPServer.run``; everything else, the capture and the serving, is the package's own.
"""
from __future__ import annotations

import runpy
import sys
from typing import Any

from mcp.server.mcpserver import server

PORT = int(sys.argv.pop(1))
_run = server.MCPServer.run


def _on_port(self: server.MCPServer, transport: Any = "stdio", **options: Any) -> None:
    _run(self, transport, port=PORT, **options)


server.MCPServer.run = _on_port  # type: ignore[method-assign]
sys.argv = ["agentskills_mcp_server", *sys.argv[1:], "--transport", "streamable-http"]
runpy.run_module("agentskills_mcp_server", run_name="__main__")
