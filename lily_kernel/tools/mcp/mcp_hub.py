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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lily_kernel.skills import remote
from lily_kernel.tools.mcp.mcp_client import START_TIMEOUT, Server
from lily_kernel.tools.mcp.mcp_config import ServerConfig
from lily_kernel.tools.mcp.mcp_tools import McpImage, McpTool, make_tool, tool_name
from lily_kernel.tools.tool_registry import ToolIdentity, ToolRegistry

_LIVE: weakref.WeakSet[Hub] = weakref.WeakSet()


class Hub:
    """The MCP servers of one session."""

    def __init__(self, configs: Iterable[ServerConfig], workspace: Path,
                 trusted: Callable[[], bool],
                 record: Callable[[], Mapping[str, str]] | None = None) -> None:
        self.workspace = Path(workspace)
        self._is_trusted = trusted  # asked again while workspace servers wait for /trust
        #: the trust record's skills: a workspace server's skill loads as /trust recorded it
        self._record = record or (lambda: {})
        self.trusted = trusted()
        self.servers: dict[str, Server] = {}
        self.problems: list[str] = []  # one line each: name collisions
        self.shown: list[McpImage] = []  # images returned since the face last took them
        self._synced: dict[str, int] = {}
        self._seen: dict[str, ToolIdentity] = {}  # each tool's identity when last listed
        self.changes: dict[str, list[str]] = {}  # server -> what its tools/list changed
        self.budget: float | None = None  # the request's deadline (seconds), set per request
        self.reviewed: dict[str, dict[str, str]] = {}  # server -> skill uri -> its key
        self.pending: set[str] = set()  # servers still starting at the last skill_roots
        self._listed: dict[str, int] = {}  # each server's skills listing at the last skill_roots
        for config in configs:
            self.servers[config.name] = self._server(config)
        _LIVE.add(self)

    def _server(self, config: ServerConfig) -> Server:
        """A stopped server for ``config``; a workspace's waits for /trust when untrusted."""
        server = Server(config, str(self.workspace))
        waits = not (config.error or config.disabled)
        if config.from_workspace and not self.trusted and waits:
            server.state = "untrusted"
            server.reason = ("the workspace is not trusted: run /trust to start the "
                             f"servers of {self.workspace}")
        return server

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
            self.reviewed.pop(name, None)  # its skills as it lists them now are reviewed
        return server

    def reconfigure(self, configs: Iterable[ServerConfig]) -> list[str]:
        """The configuration as read again (``/mcp``, docs/mcp.md#commands): a server no
        longer configured stops, a new one starts, a changed one starts again as configured
        now; an unchanged one keeps running. One line per change. A workspace server added or
        changed since the workspace was trusted waits for /trust, like any untrusted one."""
        wanted = {config.name: config for config in configs}
        lines = []
        new = [c for n, c in wanted.items()
               if c.from_workspace and (n not in self.servers or self.servers[n].config != c)]
        if new:  # the workspace changed: is it still as the user trusted it?
            self.trusted = self.trusted and self._is_trusted()
        for name in [n for n in self.servers if n not in wanted]:
            self._stop(self.servers.pop(name))
            lines.append(f"'{name}' is no longer configured: stopped")
        for name, config in wanted.items():
            old = self.servers.get(name)
            if old is not None and old.config == config:
                continue
            if old is not None:
                self._stop(old)
            server = self.servers[name] = self._server(config)
            if server.state == "stopped":
                server.start()
            what = ("added" if old is None else
                    f"changed ({', '.join(_changed(old.config, config))})")
            lines.append(f"'{name}' {what}: " + (
                "waits for /trust" if server.state == "untrusted" else
                "disabled" if config.disabled else
                f"not started: {config.error}" if config.error else "started"))
        if lines:
            self._synced = {"": -1}  # the registry is rebuilt at the next sync
        return lines

    @staticmethod
    def _stop(server: Server) -> None:
        if server.state in ("ready", "starting"):
            server.stop()

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
        claims: dict[str, list[tuple[str, Server, Any]]] = {}
        for name, server in self.servers.items():
            if server.state == "ready":
                for listed in server.tools:
                    claims.setdefault(tool_name(name, listed.name), []).append(
                        (name, server, listed))
        for full, owners in claims.items():
            who = " and ".join(f"'{listed.name}' of server '{name}'"
                               for name, _, listed in owners)
            if len(owners) > 1:  # neither wins: an approval must never pass to the other
                self.problems.append(f"MCP tool name {full} is claimed by {who}; both are "
                                     "left out")
                continue
            if full in registry:
                self.problems.append(f"MCP tool name {full} of {who} collides with the "
                                     f"tool '{full}'; {who} is left out")
                continue
            name, server, listed = owners[0]
            tool = make_tool(full, name, listed, self._caller(server, listed.name),
                             server.config.auto_approve, self.shown, _source(server))
            self._note_change(name, tool)
            registry.add(tool)
        self._synced = current

    def _note_change(self, server: str, tool: McpTool) -> None:
        """Remember what each tool was when first seen; a later tools/list that redefines
        one is a line in ``/mcp`` (its approval is revoked when it is next called)."""
        was = self._seen.setdefault(tool.name, tool.identity())
        now = tool.identity()
        if now != was:
            line = (f"{tool.name} changed since it was first listed: "
                    f"{', '.join(now.changes(was))}; it asks again if it was approved")
            if line not in self.changes.setdefault(server, []):
                self.changes[server].append(line)
            self._seen[tool.name] = now

    def _caller(self, server: Server, tool: str) -> Any:
        def call(args: dict[str, Any]) -> Any:
            timeout = server.config.timeout
            if self.budget is not None:  # within the request's deadline
                timeout = min(timeout, self.budget)
            return server.call(tool, args, timeout)
        return call

    # -- skills (docs/loader.md#mcp-roots) ----------------------------------------
    def skill_roots(self, wait: float = 15.0, refresh: bool = False) -> tuple[remote.RemoteRoot, ...]:
        """Each server's skill root, in the configured order: waits at most ``wait`` seconds
        in all for servers still starting (a slow one's root is empty with the reason);
        ``refresh`` lists the ready servers' skills again (``/reload_skills``). A skill
        whose entry differs from the one first seen (after the server started, ``/trust``
        or ``/mcp restart``) is held back until it is reviewed again."""
        import time
        deadline = time.monotonic() + wait
        roots = []
        self.pending = set()
        for name, server in self.servers.items():
            if server.state == "starting":
                server.wait(max(0.0, deadline - time.monotonic()))
            if server.state == "starting":
                self.pending.add(name)
            if server.state != "ready":
                if server.state in ("untrusted", "failed", "starting"):
                    why = ("still starting: its skills join once it is ready"
                           if server.state == "starting" else server.reason or server.state)
                    roots.append(remote.RemoteRoot(name, (), why))
                continue
            if refresh and server.skills.declared and server._session is not None:
                try:
                    server.run(server.skills.list(server._session))
                except TimeoutError as exc:
                    server.skills.entries, server.skills.reason = (), str(exc)
            if not server.skills.declared:
                continue
            self._listed[name] = server.skills.generation
            roots.append(remote.RemoteRoot(name, self._reviewed(name, server.skills.entries),
                                           server.skills.reason))
        return tuple(roots)

    def joined(self) -> bool:
        """Whether a server still starting at the last :meth:`skill_roots` is ready now and
        serves skills (no wait): the session then takes a new snapshot."""
        done = {n for n in self.pending if n not in self.servers or
                self.servers[n].state != "starting"}
        self.pending -= done
        return any(self.servers[n].state == "ready" and self.servers[n].skills.declared
                   for n in done if n in self.servers)

    def relisted(self) -> bool:
        """Whether a server listed its skills again since the last :meth:`skill_roots`
        (after a list_changed): the session then takes a new snapshot."""
        return any(s.state == "ready" and s.skills.declared
                   and self._listed.get(n, s.skills.generation) != s.skills.generation
                   for n, s in self.servers.items())

    def _reviewed(self, name: str, entries: tuple[remote.RemoteSkill, ...],
                  ) -> tuple[remote.RemoteSkill, ...]:
        """A workspace server's entries against the trust record (what /trust showed and
        recorded); a user's server's against what it listed first since it started."""
        if self.servers[name].config.from_workspace:
            return remote.reviewed(name, entries, self._record())
        seen = self.reviewed.get(name)
        if seen is None:
            self.reviewed[name] = {e.uri: e.key() for e in entries if e.error is None}
            return entries
        return tuple(e if e.error is not None or seen.get(e.uri) == e.key() else remote.held(
            e, f"it changed since it was reviewed (new digests or frontmatter); "
               f"/mcp restart {name} takes it as it is now") for e in entries)

    def for_trust(self) -> dict[str, str]:
        """What /trust shows and records of the workspace servers' skills as listed now:
        :func:`remote.record_key` -> :meth:`remote.RemoteSkill.key` (refused entries left
        out: they never load)."""
        return {remote.record_key(n, e.name): e.key() for n, s in self.servers.items()
                if s.config.from_workspace and s.state == "ready" and s.skills.declared
                for e in s.skills.entries if e.error is None}

    def read_skill_file(self, server_name: str, skill: remote.RemoteSkill, uri: str) -> bytes:
        """A file of ``skill`` read from its own server (never another), verified against
        the manifest; ValueError says why it is refused."""
        server = self.servers.get(server_name)
        if server is None or server.state != "ready" or server._session is None:
            raise ValueError(f"MCP server '{server_name}' is not running")
        try:
            return server.run(server.skills.read(server._session, skill, uri))
        except TimeoutError as exc:
            raise ValueError(f"MCP server '{server_name}': {uri} {exc}") from None
        except ValueError:
            raise
        except Exception as exc:
            from lily_kernel.tools.mcp.mcp_client import one_line
            raise ValueError(f"MCP server '{server_name}': {uri}: {one_line(exc)}") from None

    # -- /mcp ------------------------------------------------------------------------
    def status(self, registry: ToolRegistry | None = None, policy: Any = None,
               decide: Callable[[McpTool], str] | None = None) -> list[dict[str, Any]]:
        """Each server's state, reason, stderr's last lines and tools (approval mode:
        ``decide(tool)`` says it, from the session's permissions, when given)."""
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
                elif decide is not None and isinstance(tool, McpTool):
                    mode = decide(tool)
                elif policy is not None and policy.needs_confirmation(full):
                    mode = "approval"
                tools.append({"name": full, "tool": listed.name, "mode": mode})
            note = "; ".join([*([server.note] if server.note else []),
                              *self.changes.get(name, [])]) or None
            rows.append({"name": name, "source": server.config.source,
                         "transport": server.config.transport, "state": server.state,
                         "reason": server.reason, "note": note,
                         "protocol": server.protocol, "extensions": list(server.extensions),
                         "skills": [e.name for e in server.skills.entries],
                         "stderr": server.stderr_tail() if server.state == "failed" else [],
                         "tools": tools})
        return rows


def _changed(old: ServerConfig, new: ServerConfig) -> list[str]:
    """The settings of a server that differ between two configurations (names only: a
    changed value may be a secret)."""
    fields = ("source", "command", "args", "env", "cwd", "url", "headers", "auto_approve",
              "timeout", "disabled", "error")
    return [f for f in fields if getattr(old, f) != getattr(new, f)] or ["settings"]


def _source(server: Server) -> str:
    """What an approval of the server's tools is bound to: its configured name and command
    (with its arguments) or URL."""
    config = server.config
    where = config.url or " ".join([config.command or "", *config.args])
    return f"MCP server '{config.name}' ({config.transport}: {where})"


@atexit.register
def _close_all() -> None:
    for hub in list(_LIVE):
        hub.close()
