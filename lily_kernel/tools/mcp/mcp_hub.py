"""A session's MCP servers: which start, their tools in the registry, ``/mcp`` (docs/mcp.md).

Servers from the user's config file start at once; servers from the workspace (its
``lily.toml`` or ``.mcp.json``) start only when the workspace is trusted, since starting
a stdio server runs a command from whatever folder was opened. Before each request
:meth:`Hub.sync` puts the ready servers' tools into the session's registry (again when a
server's tool list changed), so the model is offered what the servers offer now, under
the tool policy.
"""
from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lily_kernel.tools.mcp.mcp_client import START_TIMEOUT, Server
from lily_kernel.tools.mcp.mcp_config import ServerConfig
from lily_kernel.tools.mcp.mcp_tools import McpImage, McpTool, make_tool, tool_name
from lily_kernel.tools.tool_registry import ToolRegistry

_LIVE: weakref.WeakSet[Hub] = weakref.WeakSet()


class Hub:
    """The MCP servers of one session."""

    def __init__(self, configs: Iterable[ServerConfig], workspace: Path,
                 trusted: Callable[[], bool]) -> None:
        self.workspace = Path(workspace)
        self._is_trusted = trusted  # asked again while workspace servers wait for /trust
        self.trusted = trusted()
        self.servers: dict[str, Server] = {}
        self.problems: list[str] = []  # one line each: name collisions
        self.shown: list[McpImage] = []  # images returned since the face last took them
        self._synced: dict[str, int] = {}
        self.budget: float | None = None  # the request's deadline (seconds), set per request
        for config in configs:
            server = Server(config, str(self.workspace))
            waits = not (config.error or config.disabled)
            if config.from_workspace and not self.trusted and waits:
                server.state = "untrusted"
                server.reason = ("the workspace is not trusted: run /trust to start the "
                                 f"servers of {self.workspace}")
            self.servers[config.name] = server
        _LIVE.add(self)

    def start(self) -> None:
        """Start every server that may start (in the background)."""
        for server in self.servers.values():
            if server.state == "stopped":
                server.start()

    def trust(self) -> None:
        """The workspace became trusted: start its servers."""
        self.trusted = True
        for server in self.servers.values():
            if server.state == "untrusted":
                server.state, server.reason = "stopped", None
                server.start()

    def restart(self, name: str) -> Server:
        """``/mcp restart NAME``; KeyError when no such server."""
        server = self.servers[name]
        if server.state not in ("untrusted", "disabled") and not server.config.error:
            server.restart()
        return server

    def close(self) -> None:
        """Stop every server (``/new``, the kernel's exit)."""
        for server in self.servers.values():
            if server.state in ("ready", "starting"):
                server.stop()

    # -- tools in the registry ---------------------------------------------------
    def sync(self, registry: ToolRegistry, wait: float = START_TIMEOUT,
             budget: float | None = None) -> None:
        """Put the ready servers' current tools into ``registry`` (waiting up to ``wait``
        seconds for servers still starting); a call then ends at its server's timeout or
        ``budget``, the request's deadline, whichever is first. A name collision is one line in
        :attr:`problems` naming both tools, and the first keeps the name."""
        self.budget = budget
        if not self.trusted and any(s.state == "untrusted" for s in self.servers.values()) \
                and self._is_trusted():
            self.trust()  # the user ran /trust since: the workspace's servers start now
        for server in self.servers.values():
            server.wait(wait)
        current = {name: server.generation for name, server in self.servers.items()
                   if server.state == "ready"}
        if current == self._synced:
            return
        for tool in list(registry):
            if isinstance(tool, McpTool):
                registry.remove(tool.name)
        self.problems = []
        owners: dict[str, str] = {}
        for name, server in self.servers.items():
            if server.state != "ready":
                continue
            for listed in server.tools:
                full = tool_name(name, listed.name)
                where = f"'{listed.name}' of server '{name}'"
                if full in registry or full in owners:
                    first = owners.get(full, f"the tool '{full}'")
                    self.problems.append(f"MCP tool name {full} of {where} collides with "
                                         f"{first}; {where} is left out")
                    continue
                owners[full] = where
                registry.add(make_tool(full, name, listed, self._caller(server, listed.name),
                                       server.config.auto_approve, self.shown))
        self._synced = current

    def _caller(self, server: Server, tool: str) -> Any:
        def call(args: dict[str, Any]) -> Any:
            timeout = server.config.timeout
            if self.budget is not None:  # within the request's deadline
                timeout = min(timeout, self.budget)
            return server.call(tool, args, timeout)
        return call

    # -- /mcp ------------------------------------------------------------------------
    def status(self, registry: ToolRegistry | None = None,
               policy: Any = None) -> list[dict[str, Any]]:
        """Each server's state, reason, stderr's last lines and tools (approval mode)."""
        rows = []
        for name, server in self.servers.items():
            tools = []
            for listed in server.tools if server.state == "ready" else []:
                full = tool_name(name, listed.name)
                tool = registry.get(full) if registry is not None else None
                mode = "approval" if getattr(tool, "ask", True) else "auto"
                if policy is not None and registry is not None and \
                        policy.unavailable_reason(registry, full):
                    mode = "denied"
                elif policy is not None and policy.needs_confirmation(full):
                    mode = "approval"
                tools.append({"name": full, "tool": listed.name, "mode": mode})
            rows.append({"name": name, "source": server.config.source,
                         "transport": server.config.transport, "state": server.state,
                         "reason": server.reason, "note": server.note,
                         "stderr": server.stderr_tail() if server.state == "failed" else [],
                         "tools": tools})
        return rows


@atexit.register
def _close_all() -> None:
    for hub in list(_LIVE):
        hub.close()
