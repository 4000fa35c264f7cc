"""One session = one notebook (docs/session.md#state).

The session owns everything mutable: its snapshot, tools, persona, model
configuration and conversation. Nothing is shared between two sessions, and
each field changes only through the method its command calls.
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from lily_kernel.session import journal as journal_mod
from lily_kernel.session import persona as persona_mod
from lily_kernel.agent import workspace_fs
from lily_kernel.agent.builtin_tools import register_builtins
from lily_kernel.skills.loader import Host, build_snapshot
from lily_kernel.agent.client import ClientCache
from lily_kernel.agent.config import (ConfigError, ModelConfig, merged, read_config_file,
                                      user_config_path)
from lily_kernel.skills.paths import skill_roots, workspace_dir
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.agent.limits import Limits
from lily_kernel.agent.pending import HeldCall, Pending, PendingItem, decline, short
from lily_kernel.agent.tools import ToolPolicy, ToolRegistry
from lily_kernel.errors import ActionError


class Session:
    def __init__(self, workspace: str | Path | None = None, *, label: str | None = None,
                 env: Mapping[str, str] | None = None, tools: ToolRegistry | None = None,
                 host: Host | None = None, journal: bool = True,
                 add_tools: Callable[["Session"], None] | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        self._explicit_env = env is not None
        self.workspace = Path(workspace) if workspace is not None else workspace_dir(self._env)
        self.label = label
        # Eligibility is checked against the environment the session was given.
        self.host = host if host is not None else Host(sys.platform, self._env, self._env.get("PATH"))
        self._journal_enabled = journal
        if tools is None:
            tools = ToolRegistry()
            register_builtins(tools, self.workspace, files=lambda: self.files)
        self.tools = tools
        if add_tools is not None:  # a face's own tools (the notebook tools), before the snapshot
            add_tools(self)
        self.model_clients = ClientCache()
        self._config_registry = None
        self._outbox = None
        self.persona_dirs = persona_mod.persona_dirs(self.workspace, self._env)
        self._start()

    # -- lifecycle -----------------------------------------------------------
    def _start(self) -> None:
        # lily.toml is read at session start (and so again by /new); a broken file is
        # reported by the agent, and commands keep working on defaults.
        self._file_error: str | None = None
        self._model_error: str | None = None
        try:  # defaults < the user's file < the workspace's lily.toml (docs/mcp.md#configuration)
            self._user_config = read_config_file(self.workspace, user_config_path(self._env))
        except ConfigError as exc:
            self._user_config, self._file_error = {}, str(exc)
        try:
            self._workspace_config = read_config_file(self.workspace)
        except ConfigError as exc:
            self._workspace_config, self._file_error = {}, self._file_error or str(exc)
        self._file_config = merged(self._user_config, self._workspace_config)
        try:
            self.limits = Limits.from_table(self._file_config.get("limits"))
        except ValueError as exc:  # fail closed: a broken cap must not mean "no cap"
            self.limits, self._file_error = Limits(), self._file_error or f"lily.toml {exc}"
        try:
            self.policy = ToolPolicy.from_env(self._env, self._file_config.get("tools"))
            self.share_values = _share_values(self._file_config.get("notebook"))
        except ValueError as exc:  # fail closed, like a broken cap
            self.policy, self.share_values = ToolPolicy(), False
            self._file_error = self._file_error or f"lily.toml {exc}"
        self._files = None  # the file boundary, built on first use with these caps
        self._start_mcp()
        self.session_id = uuid.uuid4().hex
        self.created_at = time.time()
        self.active_agent = persona_mod.DEFAULT_AGENT
        self.model_config = self._initial_model_config()
        self.conversation: list[dict[str, Any]] = []
        self.reload_count = 0
        self.command_history: list[dict[str, Any]] = []
        self.pending: PendingItem | None = None  # shown, waiting for /confirm or /cancel
        self.offered: PendingItem | None = None  # proposed; pending once its card is shown
        self.approved: set[str] = set()  # tools `/confirm --always` let run without a card
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}  # as reported
        self.skill_snapshot = self._build_snapshot(version=1)
        self.persona = persona_mod.load(self.active_agent, self.persona_dirs)
        label = self.label or f"session-{self.session_id[:12]}"
        path = journal_mod.journal_path(self.workspace, label) if self._journal_enabled else None
        self.journal = journal_mod.Journal(path, self.limits.journal_record_bytes,
                                           self._env if self._explicit_env else None)
        self.journal.append({"event": "session_created", "session_id": self.session_id,
                             "label": self.label, "workspace": str(self.workspace),
                             "agent": self.active_agent, "model_config": self.model_config.as_dict(),
                             **self._snapshot_record()})

    def _start_mcp(self) -> None:
        """Start the configured MCP servers (docs/mcp.md); the SDK is imported only then."""
        old, self.mcp = getattr(self, "mcp", None), None
        if old is not None:
            old.close()
        from lily_kernel.mcp import config as mcp_config
        if not mcp_config.configured(self.workspace, self._user_config, self._workspace_config):
            return
        try:
            servers = mcp_config.load(self.workspace, self._env, self._user_config,
                                      self._workspace_config)
        except ConfigError as exc:
            self._file_error = self._file_error or str(exc)
            return
        from lily_kernel.mcp.hub import Hub
        self.mcp = Hub(servers, self.workspace, lambda: _trusted(self.workspace, self._env))
        self.mcp.start()

    def _initial_model_config(self) -> ModelConfig:
        config, errors = ModelConfig.from_sources(self._env, self._file_config.get("model"))
        if errors:
            self._model_error = (f"model configuration: {'; '.join(errors)}; fix it, "
                                 "or set it with /model")
        return config

    def _build_snapshot(self, version: int) -> Snapshot:
        roots = skill_roots(self._env, self.workspace)
        return build_snapshot(roots, self.tools, self.policy, version=version, host=self.host)

    def _snapshot_record(self) -> dict[str, Any]:
        return {"snapshot_version": self.skill_snapshot.version,
                "snapshot_hash": self.skill_snapshot.hash,
                "skills": self.skill_snapshot.names()}

    @property
    def snapshot(self) -> Snapshot:
        return self.skill_snapshot

    @property
    def files(self) -> workspace_fs.WorkspaceFS:
        """What the file tools may reach, with this lily.toml's caps (docs/trust-boundary.md);
        built once per session (and again after /new)."""
        if self._files is None:
            self._files = workspace_fs.for_session(self.workspace, self.limits,
                                                   self.persona_dirs, self._env)
        return self._files

    @property
    def config_error(self) -> str | None:
        """Why the agent may not run: an unreadable lily.toml (whose tool policy would be
        lost, so it fails closed until fixed and /new), or a bad model setting (until /model)."""
        return self._file_error or self._model_error

    @property
    def environ(self):
        """The environment requests read (OPENAI_API_KEY): the one the session was given, else
        the process's, live, so %env in the notebook takes effect."""
        return self._env if self._explicit_env else os.environ

    @property
    def file_config(self) -> dict[str, Any]:
        """The workspace's lily.toml, as read at session creation."""
        return self._file_config

    @property
    def config(self):
        """The workspace's Config Registry (typed internal skills), opened on first use."""
        if self._config_registry is None:
            from lily_kernel.typed.registry import ConfigRegistry
            self._config_registry = ConfigRegistry.for_workspace(self.workspace)
        return self._config_registry

    @property
    def outbox(self):
        """The workspace's ActivityPub outbox store (typed external skills), opened on first use."""
        if self._outbox is None:
            from lily_kernel.typed.outbox import Outbox
            self._outbox = Outbox.for_workspace(self.workspace)
        return self._outbox

    def offer(self, item: PendingItem) -> None:
        """Keep ``item`` until its card is shown (:meth:`show`); while anything waits, a new
        proposal is refused, never replacing it (docs/typed-skills.md#confirmation)."""
        held = self.pending or self.offered
        if held is not None and held.id != item.id:
            raise ActionError(f"card {short(held.id)} still waits for a decision")
        self.offered = item

    def show(self, item_id: str) -> bool:
        """The face displayed the card of the offered item ``item_id``: it is pending now
        (and journaled). False when that item is not on offer."""
        item = self.offered
        if item is None or item.id != item_id:
            return False
        self.offered, self.pending = None, item
        self.journal.append({"event": "action_proposed", "session_id": self.session_id,
                             "action": item.as_dict()})
        return True

    def withdraw(self) -> None:
        """Drop an offered item whose card was never shown (its request failed); a held
        call is answered, so the conversation stays consistent."""
        item, self.offered = self.offered, None
        if isinstance(item, HeldCall):
            decline(self, item, "Error: not run: the request ended before the user saw "
                                "this call")

    def keep(self, item: PendingItem) -> None:
        """Hold ``item`` pending as it is now (an uncertain delivery: only /confirm or
        /cancel may end it); it replaces only itself."""
        if self.pending is not None and self.pending.id != item.id:
            raise ActionError(f"card {short(self.pending.id)} still waits for a decision")
        self.pending = item
        self.journal.append({"event": "action_proposed", "session_id": self.session_id,
                             "action": item.as_dict()})

    def settle(self, item: Pending, outcome: str) -> None:
        """``item`` is decided (``outcome``: executed, confirmed, cancelled, declined)."""
        if self.pending is not None and self.pending.id == item.id:
            self.pending = None
        self.journal.append({"event": "action_" + outcome, "session_id": self.session_id,
                             "action_id": item.id, "skill": item.skill})

    def approve(self, tool: str) -> None:
        """``/confirm --always``: ``tool`` runs without a card until /new or a restart."""
        self.approved.add(tool)
        self.journal.append({"event": "tool_approved", "session_id": self.session_id,
                             "tool": tool, "until": "/new"})

    # -- explicit changes, one per command -----------------------------------
    def reload_skills(self) -> Snapshot:
        snap = self._build_snapshot(self.skill_snapshot.version + 1)
        self.skill_snapshot = snap
        self.reload_count += 1
        self.journal.append({"event": "skills_reloaded", "session_id": self.session_id,
                             **self._snapshot_record()})
        return snap

    def reload_persona(self) -> persona_mod.Persona:
        self.persona = persona_mod.load(self.active_agent, self.persona_dirs)
        self.journal.append({"event": "persona_reloaded", "session_id": self.session_id,
                             "agent": self.active_agent,
                             "files": [f.path for f in self.persona.files]})
        return self.persona

    def agents(self) -> list[str]:
        return persona_mod.list_agents(self.persona_dirs)

    def switch_agent(self, name: str) -> persona_mod.Persona:
        persona = persona_mod.load(name, self.persona_dirs)  # raises PersonaError
        self.persona = persona
        self.active_agent = name
        self.journal.append({"event": "agent_switched", "session_id": self.session_id,
                             "agent": name})
        return persona

    def set_model(self, **values: object) -> ModelConfig:
        self.model_config = self.model_config.changed(**values)  # raises ConfigError
        self._model_error = None  # an explicit, valid configuration replaces a broken one
        self.journal.append({"event": "model_changed", "session_id": self.session_id,
                             "model_config": self.model_config.as_dict()})
        return self.model_config

    def renew(self) -> None:
        """``/new``: a new id, a fresh snapshot, an empty conversation, default agent and model;
        the configuration (lily.toml, the user's file, MCP servers) read again, with the
        kernel's environment as it is now (``%env`` in the notebook) when none was given."""
        old = self.session_id
        self.journal.append({"event": "session_ended", "session_id": old, "reason": "/new"})
        if not self._explicit_env:
            self._env = dict(os.environ)
        self._start()

    def record_command(self, line: str, ok: bool) -> None:
        entry = {"command": line, "ok": ok, "t": round(time.time(), 3)}
        self.command_history.append(entry)
        self.journal.append({"event": "command", "session_id": self.session_id,
                             "command": line, "ok": ok})

    def add_message(self, message: dict[str, Any]) -> None:
        self.conversation.append(message)
        self.journal.append({"event": "message", "session_id": self.session_id,
                             "message": message})

    def add_usage(self, usage: Mapping[str, int] | None) -> None:
        """Add one model call's reported token usage to the session's totals (``/model``)."""
        if usage:
            self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
            self.usage["calls"] += 1

    def state(self) -> dict[str, Any]:
        """The session's fields as plain data (for inspection and tests)."""
        return {
            "session_id": self.session_id,
            "created_at": self.created_at,
            "active_agent": self.active_agent,
            "snapshot_version": self.skill_snapshot.version,
            "snapshot_hash": self.skill_snapshot.hash,
            "model_config": self.model_config.as_dict(),
            "conversation": list(self.conversation),
            "reload_count": self.reload_count,
            "command_history": list(self.command_history),
        }


def _trusted(workspace: Path, env: Mapping[str, str]) -> bool:
    """Has the user trusted ``workspace`` (``/trust``, agent/trust.py)? An unreadable trust
    record means untrusted."""
    from lily_kernel.agent import trust
    try:
        return trust.is_trusted(workspace, env)
    except ConfigError:
        return False


def _share_values(table: Any) -> bool:
    """``[notebook] share_values`` (default true): may the notebook tools show values and outputs?"""
    if table is None:
        return True
    if not isinstance(table, dict):
        raise ValueError("[notebook] must be a table")
    unknown = sorted(set(table) - {"share_values"})
    if unknown:
        raise ValueError(f"[notebook] {unknown[0]}: unknown setting (known: share_values)")
    value = table.get("share_values", True)
    if not isinstance(value, bool):
        raise ValueError(f"[notebook] share_values must be true or false, not {value!r}")
    return value
