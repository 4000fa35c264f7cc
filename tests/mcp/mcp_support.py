"""Helpers for the MCP tests (imported by name: ``from mcp_support import ...``)."""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
HOSTILE = str(HERE / "hostile_server.py")
BIN = Path(sys.executable).parent


def toml_server(name: str, command: str, args: list[str], **extra: object) -> str:
    """A ``[mcp.servers.NAME]`` table."""
    import json
    lines = [f"[mcp.servers.{name}]", f"command = {json.dumps(command)}",
             f"args = {json.dumps(args)}"]
    for key, value in extra.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


class McpWorld:
    """A workspace, a private HOME and the user's config file in it."""

    def __init__(self, base: Path) -> None:
        from agent_support import World
        self.world = World(base)
        self.workspace = self.world.workspace
        self.home = base / "home"
        self.user_file = self.home / ".config" / "lily" / "lily.toml"
        self.user_file.parent.mkdir(parents=True, exist_ok=True)
        self.sessions: list = []

    def user(self, text: str) -> None:
        self.user_file.write_text(text, encoding="utf-8")

    def session(self, server=None, journal: bool = False, **extra: str):
        session = self.world.session(server, journal=journal, **extra)
        self.sessions.append(session)
        return session

    def close(self) -> None:
        for session in self.sessions:
            if session.mcp is not None:
                session.mcp.close()


