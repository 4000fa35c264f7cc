"""A real MCP server over streamable HTTP (tests/mcp/http_server.py) on a free local port,
for the MCP and network tests (imported by name: ``from mcp_http_support import ...``)."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SERVER = Path(__file__).parent / "mcp" / "http_server.py"


@contextmanager
def mcp_http_server(token: str) -> Iterator[int]:
    """Run the server, which wants ``Authorization: Bearer <token>``, on a free port of
    127.0.0.1; yield the port once it accepts connections; stop the server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), token],
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
