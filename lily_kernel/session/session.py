"""One session = one notebook (docs/session.md#state).

The session owns everything mutable: its snapshot, tools, persona, model
configuration and conversation. Nothing is shared between two sessions, and
each field changes only through the method its command calls.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lily_kernel import redaction
from lily_kernel.agent.budget import Budget
from lily_kernel.agent.model_client import ClientCache
from lily_kernel.agent.pending import HeldCall, Pending, PendingItem, decline, short
from lily_kernel.errors import ActionError, ConfigError
from lily_kernel.session import journal_auth, persona
from lily_kernel.session.journal import Journal, JournalKey, journal_path
from lily_kernel.session.resume import Restored, requests, restore
from lily_kernel.settings import policy_layers, workspace_trust
from lily_kernel.settings.model_settings import (
    ModelConfig,
    merged,
    read_config_file,
    user_config_path,
)
from lily_kernel.settings.permissions import Mode, Permissions
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.loader import SkillCache, build_snapshot
from lily_kernel.skills.paths import (
    persona_dirs,
    shared_workspace,
    skill_roots,
    untrusted_roots,
    workspace_dir,
)
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.skills.trust_review import current as _skills_now
from lily_kernel.skills.untrusted import Untrusted
from lily_kernel.tools import workspace_fs
from lily_kernel.tools.builtin_tools import register_builtins
from lily_kernel.tools.gate import Replay
from lily_kernel.tools.tool_registry import ToolIdentity, ToolPolicy, ToolRegistry

if TYPE_CHECKING:  # opened on first use (docs/architecture.md#import-rules)
    from lily_kernel.tools.mcp.mcp_hub import Hub
    from lily_kernel.typed.outbox import Outbox
    from lily_kernel.typed.registry import ConfigRegistry


class Session:
    """One Lily session: its workspace, skills, persona, model, tools and conversation.

    ``reserved_commands``: the names of the built-in commands of the face that runs the
    session (``commands.table.BUILTIN_NAMES``, passed in: the session sits below the
    commands); no skill's ``command`` alias may take one (docs/loader.md#exclusion).
    ``resume``: take up the conversation of the journal's previous session of the same
    label (a notebook's kernel after a restart; docs/session.md#resume).
    ``client_mcp``: MCP server tables (as in ``[mcp.servers]``) an ACP client passed in
    ``session/new``, started as the user's own (docs/front-ends.md#acp).
    """
    def __init__(self, workspace: str | Path | None = None, *, label: str | None = None,
                 env: Mapping[str, str] | None = None, tools: ToolRegistry | None = None,
                 host: Host | None = None, journal: bool = True,
                 add_tools: Callable[[Session], None] | None = None,
                 reserved_commands: frozenset[str] = frozenset(), resume: bool = False,
                 client_mcp: Mapping[str, Any] | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        self._explicit_env = env is not None
        self.workspace = Path(workspace) if workspace is not None else workspace_dir(self._env)
        self.label = label
        # Eligibility is checked against the environment the session was given.
        self.host = host if host is not None else Host(sys.platform, self._env, self._env.get("PATH"))
        self.reserved_commands = reserved_commands
        self._journal_enabled = journal
        self._client_mcp = dict(client_mcp or {})  # an ACP client's servers: the user's layer
        if tools is None:
            tools = ToolRegistry()
            register_builtins(tools, self.workspace, files=lambda: self.files)
        self.tools = tools
        self.replay: Replay | None = None  # a journal's replay: whether code runs (tools/gate.py)
        if add_tools is not None:  # a face's own tools (the notebook tools), before the snapshot
            add_tools(self)
        # the administrator's endpoint allowlist, asked before every model request
        self.model_clients = ClientCache(refusal=lambda url: self.permissions.endpoint_refusal(url))
        self._journal_key: JournalKey | None = None
        self._key_problem: str | None = None  # why records are written unkeyed, if they are
        if journal:
            try:
                self._journal_key = journal_auth.load_key(self._env, create=True)
            except ConfigError as exc:
                self._key_problem = str(exc)
        self._config_registry: ConfigRegistry | None = None
        self._outbox: Outbox | None = None
        self.persona_dirs = persona_dirs(self.workspace, self._env)
        self._skill_cache = SkillCache()  # parsed SKILL.md files, for the session's life (/new too)
        # a face's own way to the files, over the boundary's checks (lily acp: the client's)
        self.files_through: Callable[[workspace_fs.WorkspaceFS],
                                     workspace_fs.WorkspaceFS] | None = None
        self._start(resume=resume)

    # -- lifecycle -----------------------------------------------------------
    def _start(self, resume: bool = False, parent: dict[str, Any] | None = None,
               carried: Restored | None = None) -> None:
        """Start afresh; ``resume``: with the previous session's conversation from the
        journal; ``carried``: with this conversation (``/fork``, whose ``parent`` names the
        session it came from in the new ``session_created`` record)."""
        self._model_error: str | None = None
        self._model_set: dict[str, object] = {}  # what /model changed, kept across /trust
        self._session_mode: Mode | None = None  # what /mode chose, kept across /trust
        self._load_config()
        self._start_mcp()
        self.session_id = uuid.uuid4().hex
        self.created_at = time.time()
        self.active_agent = persona.DEFAULT_AGENT
        self.model_config = self._initial_model_config()
        self.conversation: list[dict[str, Any]] = []
        self.conversation_times: list[float] = []  # when each message was journaled
        self.endpoints: dict[tuple[str, str], Any] = {}  # agent/endpoint_info: asked once
        self.window_source: str | None = None  # "endpoint" once its stated window is taken
        self.served_model: str | None = None  # taken as the endpoint's one model: settle_model
        self.resume_note: str | None = None  # shown once, before the first output
        self.reload_count = 0
        self.command_history: list[dict[str, Any]] = []
        self.pending: PendingItem | None = None  # shown, waiting for /confirm or /cancel
        self.offered: PendingItem | None = None  # proposed; pending once its card is shown
        self.approved: dict[str, ToolIdentity] = {}  # `/confirm --always`: tool -> identity
        self.revoked: dict[str, str] = {}  # approvals revoked, until a card says so
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}  # as reported
        self.budget = Budget(learn=self.learn_context_window, record=self._record_fit)
        self._ended = False
        self.skill_snapshot = self._build_snapshot(version=1)
        self.persona = persona.load(self.active_agent, self.persona_used())
        label = self.label or f"session-{self.session_id[:12]}"
        path = journal_path(self.workspace, label) if self._journal_enabled else None
        if resume and path is not None and self.label and self.resume_enabled:
            carried = self._restored(path)
            parent = {"resumed_from": carried.session_id} if carried and carried.messages else None
        if carried is not None and carried.messages:
            self.conversation, self.conversation_times = carried.messages, carried.times
            for key, value in carried.model_set.items():  # what /model had set, if still valid
                with contextlib.suppress(ConfigError):
                    self.model_config = self.model_config.changed(**{key: value})
                    self._model_set[key] = value
        self.journal = Journal(path, self.limits.journal_record_bytes,
                               self._env if self._explicit_env else None, key=self._journal_key)
        if self._key_problem and path is not None and self.resume_note is None:
            self.resume_note = (f"Error: {self._key_problem}; until it is fixed this notebook's "
                                "conversation cannot resume after a restart.")
        self.journal.append({"event": "session_created", "session_id": self.session_id,
                             "label": self.label, "workspace": str(self.workspace),
                             "agent": self.active_agent, "model_config": self.model_config.as_dict(),
                             **(parent or {}), **self._snapshot_record()})

    def _load_config(self) -> None:
        """Read lily.toml (at session start, /new and /trust); a broken file is reported by
        the agent, and commands keep working on defaults. An untrusted workspace's settings
        that would send a secret elsewhere are withheld (docs/trust-boundary.md#workspace-trust)."""
        self._file_error: str | None = None
        try:  # defaults < the user's file < the workspace's lily.toml (docs/mcp.md#configuration)
            self._user_config = read_config_file(self.workspace, user_config_path(self._env))
        except ConfigError as exc:
            self._user_config, self._file_error = {}, str(exc)
        try:
            self._file_config = read_config_file(self.workspace)
        except ConfigError as exc:
            self._file_config, self._file_error = {}, self._file_error or str(exc)
        self.withheld: list[workspace_trust.Withheld] = []
        self.trust_problem: str | None = None  # e.g. an unreadable trust record (fails closed)
        self.trust_note_shown = False
        self.trust_reviewed: str | None = None  # the fingerprint /trust last showed
        self._trust: workspace_trust.Status | None = None  # asked when something waits for it
        # the permission layers ask whether a workspace's lily.toml may loosen the user's
        self._workspace_trusted = bool(self._file_config) and self.trust_status().trusted
        withheld = workspace_trust.withheld(self._file_config, self._env)
        if withheld and not self.trust_status().trusted:
            self.withheld = withheld
            self._file_config = workspace_trust.without(self._file_config, withheld)
        self._workspace_config = self._file_config
        self._file_config = merged(self._user_config, self._workspace_config)
        own_outbox = self._env.get("LILY_OUTBOX_URL")
        if own_outbox:  # the user's own outbox wins over the file's
            from lily_kernel.settings.urls import plain_http_reason
            reason = plain_http_reason(own_outbox)
            if reason:
                self._file_error = self._file_error or f"LILY_OUTBOX_URL: {reason}"
            else:
                self._file_config.setdefault("activitypub", {})["outbox"] = own_outbox
        self._set_permissions(self._permission_layers())
        self._files: workspace_fs.WorkspaceFS | None = None  # the file boundary, built on first use with these caps
        self._captured: set[tuple[str, int]] = set()

    def _permission_layers(self) -> Permissions:
        """The policy of this session's layers (docs/permissions.md#layers); a malformed
        layer fails closed: the strictest defaults, and the agent does not run."""
        try:
            return policy_layers.permissions(
                self._env, user_config_path(self._env), self._user_config,
                self._workspace_config, self._workspace_trusted, self._session_mode)
        except ConfigError as exc:
            self._file_error = self._file_error or str(exc)
            return Permissions(mode=Mode.PLAN, max_mode=Mode.PLAN, share_values=False)

    def _set_permissions(self, perms: Permissions) -> None:
        """Everything that follows from the permissions: caps, tool policy, switches."""
        self.permissions = perms
        self.limits = perms.limits
        self.policy = ToolPolicy.of(perms)
        self.share_values = perms.share_values
        self.capture_reads = perms.capture_reads

    def set_mode(self, mode: Mode) -> Permissions:
        """``/mode NAME`` (until /new); ConfigError (one line) when a layer caps it lower, or
        when the policy could not be read (the session holds to plan mode until it is fixed)."""
        if not self.permissions.layers:
            raise ConfigError(f"the mode cannot change while the policy cannot be read: "
                              f"{self.config_error}")
        perms = policy_layers.with_mode(self.permissions, mode)
        self._session_mode = mode
        self._set_permissions(perms)
        self.journal.append({"event": "mode_changed", "session_id": self.session_id,
                             "mode": mode.value})
        return perms

    def _start_mcp(self) -> None:
        """Start the configured MCP servers (docs/mcp.md); the SDK is imported only then."""
        old: Hub | None = getattr(self, "mcp", None)
        self.mcp: Hub | None = None
        if old is not None:
            old.close()
        try:
            servers = self._mcp_configs(self._user_config, self._workspace_config)
        except ConfigError as exc:
            self._file_error = self._file_error or str(exc)
            return
        if servers:
            self._new_hub(servers).start()

    def _new_hub(self, servers: list[Any]) -> Hub:
        from lily_kernel.tools.mcp.mcp_hub import Hub
        hub = self.mcp = Hub(servers, self.workspace,
                             lambda: _trusted(self.workspace, self._env),
                             lambda: self.trust_status().skills)  # (docs/loader.md#mcp-roots)
        return hub

    def _mcp_configs(self, user: Mapping[str, Any], workspace: Mapping[str, Any]) -> list[Any]:
        """The configured MCP servers (ServerConfig each); ConfigError says why not."""
        from lily_kernel.tools.mcp import mcp_config
        if not (self._client_mcp or mcp_config.configured(self.workspace, user, workspace)):
            return []
        servers = mcp_config.load(self.workspace, self._env, user, workspace, self._client_mcp)
        if not self.permissions.workspace_mcp:  # the administrator forbids them
            from dataclasses import replace
            servers = [replace(s, error="the administrator's policy forbids the workspace's "
                                        "MCP servers") if s.from_workspace else s
                       for s in servers]
        return servers

    def reload_mcp(self) -> list[str]:
        """``/mcp``: the MCP servers as the user's lily.toml, the workspace's and .mcp.json
        configure them now (docs/mcp.md#commands); one line per change. Only the servers
        change: the rest of lily.toml is read again at /new or /trust."""
        try:
            servers = self._mcp_configs(
                read_config_file(self.workspace, user_config_path(self._env)),
                read_config_file(self.workspace))
        except ConfigError as exc:
            return [f"the MCP configuration cannot be read: {exc}; the servers keep the "
                    "configuration they started with"]
        if self.mcp is None and not servers:
            return []
        hub = self.mcp if self.mcp is not None else self._new_hub([])
        return list(hub.reconfigure(servers))

    def _initial_model_config(self) -> ModelConfig:
        config, errors = ModelConfig.from_sources(self._env, self._file_config.get("model"))
        if errors:
            self._model_error = (f"model configuration: {'; '.join(errors)}; fix it, "
                                 "or set it with /model")
        refusal = self.permissions.endpoint_refusal(config.base_url)
        if refusal:  # the administrator's allowlist (docs/permissions.md)
            self._model_error = self._model_error or f"{refusal}; set another with /model base_url=..."
        return config

    def trust_status(self, fresh: bool = False) -> workspace_trust.Status:
        """Whether the user trusted this workspace as it is now (``/trust``), asked once per
        configuration read (``fresh``: again); an unreadable record means untrusted, and
        :attr:`trust_problem` says why (docs/trust-boundary.md#workspace-trust)."""
        if self._trust is None or fresh:
            try:
                self._trust = workspace_trust.status(self.workspace, self._env)
                self.trust_problem = None
            except ConfigError as exc:
                self._trust, self.trust_problem = workspace_trust.Status(False, False), str(exc)
        return self._trust

    @property
    def workspace_trusted(self) -> bool:
        """Whether the user trusted this workspace's configuration files (``lily.toml``,
        ``.mcp.json``) as they are now (docs/trust-boundary.md#what-asks-again); its skills
        are checked one by one by the loader, its rules files by ``may_read_rules``."""
        return self.trust_status().trusted

    @property
    def untrusted_note(self) -> str | None:
        """The one line saying which lily.toml settings are withheld and which skills are
        held back (docs/trust-boundary.md#what-asks-again), and how to trust the workspace,
        or None when nothing is."""
        held = self.held_skills()
        status = self.trust_status()
        if not (self.withheld or held or status.changed):
            return None
        why = self.trust_problem or (status.why() if status.recorded else None)
        line = workspace_trust.untrusted_line(self.withheld, why) if self.withheld else ""
        if not line and status.changed:
            line = (f"{status.why()}: its MCP servers wait and it may only restrict the "
                    f"policy; {workspace_trust.HOW_TO_TRUST}.")
        if held:
            line += (" " if line else "") + (
                f"Workspace skills held back (what they can do changed since it was trusted): "
                f"{', '.join(held)}; {workspace_trust.HOW_TO_TRUST}.")
        return line

    def held_skills(self) -> list[str]:
        """The names of the workspace's own skills held back because they can do more than
        when the user trusted the workspace (none when it was never trusted: then every one
        waits, and :attr:`untrusted_note` says so through the settings)."""
        status = self._trust
        if status is None or not status.recorded:
            return []
        return [d.skill or "" for d in self.skill_snapshot.untrusted()]

    def trust_fingerprint(self) -> str:
        """What ``/trust`` shows and ``/trust --yes`` checks: a sha256 over the workspace's
        configuration files and what each of its own skills can do now."""
        return workspace_trust.fingerprint(self.workspace, self._skills_now())

    def _skills_now(self) -> dict[str, str]:
        """The workspace's skills as trust records them: its own folders' and its MCP
        servers' as they list them now."""
        roots = skill_roots(self._env, self.workspace)
        mcp = self.mcp.for_trust() if self.mcp is not None else {}
        return {**_skills_now(roots, untrusted_roots(roots)), **mcp}

    def apply_trust(self, trusted: bool, expected: str | None = None) -> None:
        """``/trust --yes`` or ``/trust --revoke``: record it, then read lily.toml again and
        load the skills again (the workspace's own now load, or no longer do); the
        conversation, agent and what ``/model`` set are kept. ``expected``: the fingerprint
        the user reviewed (ConfigError, nothing recorded, when the workspace changed since)."""
        if trusted:
            workspace_trust.trust(self.workspace, self._env, expected, self._skills_now())
        else:
            workspace_trust.revoke(self.workspace, self._env)
        self._load_config()
        self._model_error = None
        config = self._initial_model_config()
        if self._model_set:
            config = config.changed(**self._model_set)
        self.model_config = config
        self.served_model = None  # the endpoint may be another now: asked again
        self.journal.append({"event": "workspace_trusted" if trusted else "workspace_untrusted",
                             "session_id": self.session_id,
                             "fingerprint": self.trust_fingerprint(),
                             "model_config": self.model_config.as_dict()})
        self._start_mcp()  # the servers as reviewed start now (or stop, when revoked)
        self.reload_skills(wait=0.0)  # the workspace's own skills (its servers' join once
        # they are ready); eligibility follows the policy
        self.reload_persona()  # the workspace's own persona/, now used (or no longer)

    def _build_snapshot(self, version: int, fresh: bool = False, wait: float = 0.0) -> Snapshot:
        """Load the skills; the workspace's own folders are only listed until the user
        trusts the workspace (docs/trust-boundary.md#workspace-trust)."""
        roots = skill_roots(self._env, self.workspace)
        gated = untrusted_roots(roots)
        untrusted = None
        if fresh and not gated:
            self.trust_status(fresh)  # a workspace server's skills are checked against it
        if gated:  # never trusted: listed; trusted once: each skill against what it was
            status = self.trust_status(fresh)
            if self.trust_problem or not status.recorded:
                untrusted = Untrusted(gated, self.trust_problem or status.why())
            else:
                untrusted = Untrusted(gated, status.why(), status.skills)
        remote = self.mcp.skill_roots(wait, refresh=fresh and wait > 0) \
            if self.mcp is not None else ()  # MCP servers' skills (docs/loader.md#mcp-roots)
        return build_snapshot(roots, self.tools, self.policy, version=version, host=self.host,
                              reserved=self.reserved_commands, cache=self._skill_cache,
                              untrusted=untrusted, remote=remote)

    def trusted_preview(self) -> Snapshot:
        """What a load would make of the skills were the workspace trusted (``/trust``
        shows it; nothing is loaded or offered): a snapshot of its own, not the session's."""
        return build_snapshot(skill_roots(self._env, self.workspace), self.tools, self.policy,
                              version=0, host=self.host, reserved=self.reserved_commands)

    def _snapshot_record(self) -> dict[str, Any]:
        return {"snapshot_version": self.skill_snapshot.version,
                "snapshot_hash": self.skill_snapshot.hash,
                "skills": self.skill_snapshot.names()}

    @property
    def snapshot(self) -> Snapshot:
        """The session's skill snapshot; an MCP server still starting when it was taken has
        its skills join, as a new version, once it is ready, and one that listed its skills
        again (a list_changed) has them taken again (docs/loader.md#mcp-roots)."""
        if self.mcp is not None and ((self.mcp.pending and self.mcp.joined())
                                     or self.mcp.relisted()):
            self.reload_skills(wait=0.0)
        return self.skill_snapshot

    @property
    def files(self) -> workspace_fs.WorkspaceFS:
        """What the file tools may reach, with this lily.toml's caps (docs/trust-boundary.md);
        built once per session (and again after /new)."""
        if self._files is None:
            files = workspace_fs.for_session(self.workspace, self.limits,
                                             self.persona_dirs, self._env)
            if self.capture_reads:
                files.on_read = self._capture
            self._files = files if self.files_through is None else self.files_through(files)
        return self._files

    def _capture(self, path: str, data: bytes) -> None:
        """Journal a file a tool read (``[journal] capture_reads``), once per content, so
        ``lily logs replay`` can rebuild it (docs/logs.md#replay). A file that is not UTF-8
        is recorded by size and hash only: redaction reads text, so a ``.env`` holding a key
        in another encoding must not reach the journal (docs/logs.md#captured-reads)."""
        key = (path, hash(data))
        if key in self._captured:
            return
        self._captured.add(key)
        try:
            record: dict[str, Any] = {"text": data.decode("utf-8")}
        except UnicodeDecodeError:  # bytes redaction cannot see: never their content
            digest = hashlib.sha256(data).hexdigest()
            record = {"binary": f"binary, {len(data):,} bytes, sha256 {digest}",
                      "sha256": digest}
        self.journal.append({"event": "file_read", "session_id": self.session_id,
                             "path": path, "bytes": len(data), **record})

    @property
    def config_error(self) -> str | None:
        """Why the agent may not run: an unreadable lily.toml (whose tool policy would be
        lost, so it fails closed until fixed and /new), or a bad model setting (until /model)."""
        return self._file_error or self._model_error

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment requests read (OPENAI_API_KEY): the one the session was given, else
        the process's, live, so %env in the notebook takes effect."""
        return self._env if self._explicit_env else os.environ

    @property
    def file_config(self) -> dict[str, Any]:
        """The workspace's lily.toml, as read at session creation."""
        return self._file_config

    @property
    def config(self) -> ConfigRegistry:
        """The workspace's Config Registry (typed internal skills), opened on first use."""
        if self._config_registry is None:
            from lily_kernel.typed.registry import ConfigRegistry
            self._config_registry = ConfigRegistry.for_workspace(
                self.workspace, shared=shared_workspace(self._env))
        return self._config_registry

    @property
    def outbox(self) -> Outbox:
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

    def approve(self, tool: str, identity: ToolIdentity) -> None:
        """``/confirm --always``: ``tool``, as ``identity``, runs without a card until /new or
        a restart; any change to it revokes that (docs/permissions.md#approvals)."""
        self.approved[tool] = identity
        self.journal.append({"event": "tool_approved", "session_id": self.session_id,
                             "tool": tool, "source": identity.source, "until": "/new"})

    def revoke(self, tool: str, why: str) -> None:
        """Forget the approval of ``tool``: it changed (``why``, one line)."""
        if self.approved.pop(tool, None) is not None:
            self.revoked[tool] = why
            self.journal.append({"event": "tool_approval_revoked",
                                 "session_id": self.session_id, "tool": tool, "why": why})

    # -- explicit changes, one per command -----------------------------------
    def reload_skills(self, wait: float = 15.0) -> Snapshot:
        """Load the skills again as a new snapshot version (/reload_skills), waiting at most
        ``wait`` seconds for MCP servers still starting (and listing the others again)."""
        snap = self._build_snapshot(self.skill_snapshot.version + 1, fresh=True, wait=wait)
        self.skill_snapshot = snap
        self.reload_count += 1
        self.journal.append({"event": "skills_reloaded", "session_id": self.session_id,
                             **self._snapshot_record()})
        return snap

    def reload_persona(self) -> persona.Persona:
        """Read the persona files again (/reload_persona; after /trust)."""
        self.persona = persona.load(self.active_agent, self.persona_used())
        self.journal.append({"event": "persona_reloaded", "session_id": self.session_id,
                             "agent": self.active_agent,
                             "files": [f.path for f in self.persona.files]})
        return self.persona

    def persona_used(self) -> tuple[Path, ...]:
        """The persona folders read: the workspace's own only once it is trusted."""
        return persona.usable(self.workspace, self.persona_dirs, self._env,
                              lambda: self.workspace_trusted)

    def agents(self) -> list[str]:
        """The persona agents /agent can switch to."""
        return persona.list_agents(self.persona_used())

    def switch_agent(self, name: str) -> persona.Persona:
        """Switch to persona agent ``name`` (/agent NAME)."""
        chosen = persona.load(name, self.persona_used())  # raises PersonaError
        self.persona = chosen
        self.active_agent = name
        self.journal.append({"event": "agent_switched", "session_id": self.session_id,
                             "agent": name})
        return chosen

    def set_model(self, **values: object) -> ModelConfig:
        """Change model settings (/model key=value); ConfigError for a bad value."""
        config = self.model_config.changed(**values)  # raises ConfigError
        refusal = self.permissions.endpoint_refusal(config.base_url)
        if refusal:
            raise ConfigError(refusal)
        self.model_config = config
        self._model_set.update(values)
        if "model" in values or "base_url" in values:
            self.served_model = None
        if "context_window" in values:
            self.window_source = None
        self._model_error = None  # an explicit, valid configuration replaces a broken one
        self.journal.append({"event": "model_changed", "session_id": self.session_id,
                             "model_config": self.model_config.as_dict(),
                             "set": {k: v for k, v in values.items() if k != "base_url"}})
        return self.model_config

    @property
    def model_named(self) -> bool:
        """Whether a model name was given (``/model NAME``, ``LILY_MODEL``, ``[model] model``);
        when none was, a local endpoint's one model is taken (agent/endpoint_info.settle_model)."""
        return "model" in self._model_set or bool(self._env.get("LILY_MODEL")) or \
            "model" in (self._file_config.get("model") or {})

    def take_served_model(self, name: str) -> None:
        """Use ``name``, the one model the endpoint serves, as no model was named
        (docs/agent.md#the-endpoints-models)."""
        self.model_config = self.model_config.changed(model=name)
        self.served_model = name
        self.journal.append({"event": "model_served", "session_id": self.session_id,
                             "model": name})

    def learn_context_window(self, tokens: int) -> None:
        """An endpoint named its context size: ``[model] context_window`` takes it (until
        ``/model`` or ``/new`` sets another) — docs/agent.md#context-budget."""
        self.model_config = self.model_config.changed(context_window=str(tokens))
        self.journal.append({"event": "context_window_learned", "session_id": self.session_id,
                             "context_window": tokens})

    def replace_turns(self, end: int, summary: list[dict[str, Any]], turns: int) -> None:
        """``/compact``: the conversation up to ``end`` (``turns`` turns) becomes ``summary``."""
        self.conversation[:end] = summary
        self.conversation_times[:end] = [time.time()] * len(summary)
        self.journal.append({"event": "conversation_compacted", "session_id": self.session_id,
                             "turns": turns, "end": end, "messages": summary})

    def _record_fit(self, entry: dict[str, Any]) -> None:
        """Journal what a request left out to fit the context window."""
        self.journal.append({**entry, "session_id": self.session_id})

    def end(self, reason: str) -> None:
        """Journal this session's end (``shutdown``, ``restart``, ``SIGTERM``); once only."""
        if self._ended:
            return
        self._ended = True
        self.journal.append({"event": "session_ended", "session_id": self.session_id,
                             "reason": reason})

    def renew(self) -> None:
        """``/new``: a new id, a fresh snapshot, an empty conversation, default agent and model;
        the configuration (lily.toml, the user's file, MCP servers) read again, with the
        kernel's environment as it is now (``%env`` in the notebook) when none was given."""
        old = self.session_id
        self.journal.append({"event": "session_ended", "session_id": old, "reason": "/new"})
        if not self._explicit_env:
            self._env = dict(os.environ)
        self._start()

    def _restored(self, path: Path) -> Restored | None:
        """The previous session's conversation in the journal at ``path``, or None. Only a
        journal Lily wrote for this user resumes (docs/logs.md#authenticity); a foreign one,
        or one that cannot be read, resumes nothing, and the note (one ``Error:`` line)
        says why."""
        if not path.exists():
            return None
        checked = journal_auth.authenticity(path, self._env)
        if isinstance(checked, journal_auth.Foreign):
            self.resume_note = checked.error()
            return None
        if checked.session_id is None:
            return None
        carried = restore(list(checked.records), checked.session_id)
        if carried.problem:
            self.resume_note = (f"Error: the conversation was not resumed: {carried.problem}; "
                                "it starts fresh (`lily logs` shows the old one).")
            return None
        if carried.messages:
            self.resume_note = carried.line()
        return carried

    @property
    def resume_enabled(self) -> bool:
        """``[session] resume`` (default true): does a notebook's new kernel resume?"""
        try:
            return _flag(self._file_config.get("session"), "session", "resume", True)
        except ValueError:
            return False

    def take_resume_note(self) -> str | None:
        """The resume line, once: the first output of the session shows it."""
        note, self.resume_note = self.resume_note, None
        return note

    def requests(self) -> list[tuple[int, float, str]]:
        """``/rewind``: (index, time, first line) of each request the model still sees."""
        return requests(self.conversation, self.conversation_times)

    def rewind(self, number: int) -> list[tuple[int, float, str]]:
        """``/rewind N``: drop request ``number`` (1-based) and all after it from the
        conversation; the journal keeps them and records the rewind. The dropped requests."""
        listed = self.requests()
        if not 1 <= number <= len(listed):
            raise ConfigError(f"no request {number}: this conversation has "
                              f"{len(listed)} (see /rewind)")
        keep = listed[number - 1][0]
        del self.conversation[keep:], self.conversation_times[keep:]
        self.journal.append({"event": "conversation_rewound", "session_id": self.session_id,
                             "request": number, "keep": keep})
        return listed[number - 1:]

    def fork(self, name: str | None = None) -> str:
        """``/fork [name]``: a new session carrying this conversation; the old id."""
        old = self.session_id
        carried = Restored(session_id=old, messages=list(self.conversation),
                           times=list(self.conversation_times), model_set=dict(self._model_set))
        self.journal.append({"event": "session_ended", "session_id": old, "reason": "/fork"})
        self._start(parent={"forked_from": old, **({"fork_name": name} if name else {})},
                    carried=carried)
        return old

    def record_command(self, line: str, ok: bool, error: str | None = None) -> None:
        """Keep one command in the history and the journal: ``line`` is redacted here, once,
        where it is stored (URL userinfo, live secret values), and both keep that text
        (docs/limits-and-secrets.md#secrets); a failed command's ``error`` line too."""
        line = redaction.redact(line, self.environ)
        entry = {"command": line, "ok": ok, "t": round(time.time(), 3)}
        self.command_history.append(entry)
        extra = {} if error is None else {"error": redaction.redact(error, self.environ)}
        self.journal.append({"event": "command", "session_id": self.session_id,
                             "command": line, "ok": ok, **extra}, redacted=True)

    def record_interrupted(self) -> None:
        """Journal that the user interrupted the running request (``lily logs show``)."""
        self.journal.append({"event": "interrupted", "session_id": self.session_id})

    def record_python(self, source: str, ok: bool, error: str | None,
                      outputs: list[dict[str, Any]]) -> None:
        """Journal a ``%%python`` cell: its source and a bounded summary of its outputs
        (text, image hashes), redacted like every record (docs/logs.md#python-cells)."""
        self.journal.append({"event": "python", "session_id": self.session_id,
                             "source": source, "ok": ok, "error": error, "outputs": outputs})

    def add_message(self, message: dict[str, Any]) -> None:
        """Add one message to the conversation (journaled)."""
        self.conversation.append(message)
        self.conversation_times.append(time.time())
        self.journal.append({"event": "message", "session_id": self.session_id,
                             "message": message})

    def record_prose(self, text: str) -> None:
        """Journal a prose cell (a request to the agent), as :meth:`record_command` does a
        command: ``lily logs`` rebuilds the session's cells from both (docs/logs.md)."""
        self.journal.append({"event": "prose", "session_id": self.session_id, "text": text})

    def record_error(self, text: str) -> None:
        """Journal why a request to the agent failed (one line, as the user saw it)."""
        self.journal.append({"event": "error", "session_id": self.session_id, "error": text})

    def add_usage(self, usage: Mapping[str, int] | None, model: str | None = None) -> None:
        """Add one model call's reported token usage to the session's totals (``/model``);
        the call, its model and usage are journaled (``lily logs usage``)."""
        self.journal.append({"event": "model_call", "session_id": self.session_id,
                             "model": model or self.model_config.model,
                             "usage": dict(usage) if usage else None})
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


def _flag(table: Any, section: str, key: str, default: bool) -> bool:
    """The one true/false setting ``key`` of the lily.toml table ``[section]``; ValueError
    naming it when the table or value is malformed or holds another key."""
    if table is None:
        return default
    if not isinstance(table, dict):
        raise ValueError(f"[{section}] must be a table")
    unknown = sorted(set(table) - {key})
    if unknown:
        raise ValueError(f"[{section}] {unknown[0]}: unknown setting (known: {key})")
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"[{section}] {key} must be true or false, not {value!r}")
    return value


def _trusted(workspace: Path, env: Mapping[str, str]) -> bool:
    """Has the user trusted ``workspace`` (``/trust``, settings/workspace_trust.py)? An unreadable trust
    record means untrusted."""
    try:
        return workspace_trust.is_trusted(workspace, env)
    except ConfigError:
        return False
