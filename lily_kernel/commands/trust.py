"""``/trust``: review what this workspace ships; ``/trust --yes`` trusts it as reviewed.

``/trust`` trusts nothing: it shows what trusting would let the workspace do — its
``lily.toml`` settings (the endpoint and outbox that would receive secrets, the tools
policy, ``capture_reads``, every other table), each MCP server's full command line or URL
with the names of the variables and secrets it would receive (values masked), and the
skills of its own folders that would load (mode, alias, the tool a ``tool_dispatch`` calls,
what they would shadow). ``/trust --yes`` (or the card's **Trust** button) then records
trust for exactly what was shown: if what it can do changed since, nothing is trusted.
``/trust --revoke`` forgets it. For a workspace trusted before, the review says what
changed: its configuration files, and the skills held back because they can do more than
when trusted (:func:`held_back` is the sentence ``/reload_skills`` adds for them,
docs/trust-boundary.md#what-asks-again). A command, never a tool: the model cannot call it. The
record lives in the user's data folder (``settings/workspace_trust.py``), out of the file
tools' reach. Contract: docs/trust-boundary.md#workspace-trust.
"""
from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lily_kernel.commands.results import Notice, TrustReview
from lily_kernel.commands.sanitize import code_span, md_text
from lily_kernel.errors import CommandError, ConfigError, command_error
from lily_kernel.redaction import redact_urls
from lily_kernel.session.session import Session
from lily_kernel.settings.model_settings import CONFIG_FILE, read_config_file
from lily_kernel.skills.paths import WORKSPACE_SOURCES
from lily_kernel.skills.snapshot import Snapshot

#: lily.toml settings that route a secret or change what runs, in the order shown first.
_SHOWN: tuple[tuple[str, str, str], ...] = (
    ("model", "base_url", "endpoint: would receive OPENAI_API_KEY and the conversation"),
    ("activitypub", "outbox", "outbox: would receive LILY_OUTBOX_TOKEN and the activities"),
    ("activitypub", "actor", "ActivityPub actor"),
    ("tools", "allow", "tools policy: allow"),
    ("tools", "deny", "tools policy: deny"),
    ("tools", "confirm", "tools policy: confirm first"),
    ("journal", "capture_reads", "capture_reads: would copy every file a tool reads into "
                                 "the journal"),
)
_VAR = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}")
RULES_FILES = ("AGENTS.md", "CLAUDE.md")


def persona_files(workspace: Path, dirs: tuple[Path, ...], env: Mapping[str, str]) -> list[str]:
    """The files of the workspace's own ``persona/`` (relative, sorted; at most 50 named)."""
    from lily_kernel.session.persona import workspace_persona
    own = workspace_persona(workspace, dirs, env)
    if own is None:
        return []
    found = sorted(str(p.relative_to(workspace)) for p in own.rglob("*") if p.is_file())
    return found[:50] + ([f"… {len(found) - 50} more"] if len(found) > 50 else [])
#: Hex digits of the fingerprint /trust shows, which ``/trust --yes FINGERPRINT`` names.
SHOWN_FINGERPRINT = 16
_HEX = re.compile(r"[0-9a-f]+\Z")


def _code(text: str) -> str:
    """``text`` as a code span in running text (bullets, not a table)."""
    return code_span(text, table=False)


def _value(value: Any) -> str:
    """A setting as shown: URL credentials masked, cut short, as code."""
    text = redact_urls(value if isinstance(value, str) else json.dumps(value, default=str))
    if len(text) > 300:
        text = text[:297] + "..."
    return _code(text)


def masked(value: str) -> str:
    """``value`` with every literal part masked and each ``${VAR}`` kept by name, so the
    user sees which variables a server would receive and no secret written in the file."""
    out, last = [], 0
    for match in _VAR.finditer(value):
        if match.start() > last:
            out.append("•••")
        out.append(match.group(0))
        last = match.end()
    if last < len(value):
        out.append("•••")
    return " ".join(out) if out else "(empty)"


def settings_lines(data: Mapping[str, Any], session: Session) -> list[str]:
    """Markdown bullets: what this lily.toml would change (every table but the MCP servers)."""
    lines = []
    env = session.environ
    for table, key, what in _SHOWN:
        section = data.get(table)
        if isinstance(section, Mapping) and key in section:
            note = ""
            if (table, key) == ("model", "base_url"):
                now = env.get("OPENAI_BASE_URL")
                used = session.model_config.base_url
                note = (" (no effect: OPENAI_BASE_URL in the environment wins)" if now else
                        " (the endpoint in use already)" if used == section[key] else
                        f" (instead of {_code(redact_urls(used))})" if used else
                        " (instead of the default endpoint)")
            elif (table, key) == ("activitypub", "outbox") and env.get("LILY_OUTBOX_URL"):
                note = " (no effect: LILY_OUTBOX_URL in the environment wins)"
            lines.append(f"- {md_text(what)}: `[{table}] {key}` = {_value(section[key])}"
                         f"{note}")
    shown = {(t, k) for t, k, _ in _SHOWN}
    for table, section in data.items():
        if table == "mcp":
            continue  # the servers are shown on their own
        if not isinstance(section, Mapping):
            lines.append(f"- {_code(str(table))} = {_value(section)}")
            continue
        for key, value in section.items():
            if (table, key) not in shown:
                lines.append(f"- {_code(f'[{table}] {key}')} = {_value(value)}")
    return lines


def _servers(workspace: Path, data: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """(name, source, raw table) of every MCP server the workspace names, as written."""
    from lily_kernel.tools.mcp import mcp_config
    found: list[tuple[str, str, Any]] = []
    mcp = data.get("mcp")
    servers = mcp.get("servers") if isinstance(mcp, Mapping) else None
    if isinstance(servers, Mapping):
        found += [(str(n), CONFIG_FILE, t) for n, t in servers.items()]
    path = workspace / mcp_config.MCP_JSON
    if path.is_file():
        found += [(n, mcp_config.MCP_JSON, t) for n, t in mcp_config.read_mcp_json(path).items()]
    return found


def server_lines(name: str, source: str, table: Any) -> list[str]:
    """Markdown bullets for one MCP server as the file writes it: its full command line or
    URL, working folder, env and headers (variable names kept, values masked), what it
    would run without asking (auto_approve)."""
    head = f"- MCP server {_code(name)} ({md_text(source)})"
    if not isinstance(table, Mapping):
        return [f"{head}: malformed ({md_text(type(table).__name__)}); it cannot start"]
    lines = []
    if table.get("disabled") is True:
        head += ", disabled"
    if isinstance(table.get("url"), str):
        lines.append(f"{head}: connects to {_code(redact_urls(table['url']))}")
    else:
        argv = [str(table.get("command", "?")),
                *(str(a) for a in table.get("args", []) if isinstance(table.get("args"), list))]
        lines.append(f"{head}: runs {_code(shlex.join(argv))}")
    if isinstance(table.get("cwd"), str):
        lines.append(f"  - in the folder {_code(table['cwd'])}")
    for key, what in (("env", "environment"), ("headers", "headers")):
        values = table.get(key)
        if isinstance(values, Mapping) and values:
            shown = ", ".join(_code(f"{k}={masked(str(v))}") for k, v in values.items())
            lines.append(f"  - {what}: {shown}")
    approve = table.get("auto_approve", table.get("autoApprove", table.get("alwaysAllow")))
    if isinstance(approve, list) and approve:
        lines.append("  - runs without asking (auto_approve): "
                     + ", ".join(_code(str(a)) for a in approve))
    return lines


def skill_lines(preview: Snapshot) -> list[str]:
    """Markdown bullets: the workspace's own skills that would load, and what they would
    take from the user's or bundled skills (shadowed names, aliases) or why one would not."""
    lines = []
    for skill in preview.skills:
        if skill.source not in WORKSPACE_SOURCES:
            continue
        from lily_kernel.commands.render import mode_label
        parts = [f"{md_text(skill.source)}, {md_text(mode_label(skill))}"]
        if skill.command:
            bound = preview.aliases.get(skill.command) == skill.name
            parts.append(f"alias {_code('/' + skill.command)}"
                         + ("" if bound else " (not bound)"))
        if skill.command_tool:
            parts.append(f"calls the tool {_code(skill.command_tool)}")
        line = f"- skill {_code(skill.name)} ({'; '.join(parts)})"
        if skill.summary:
            line += f": {md_text(skill.summary[:200])}"
        lines.append(line)
    for diag in preview.diagnostics:
        ours = diag.source in WORKSPACE_SOURCES
        shadow = diag.kind == "shadowed" and any(w in diag.reason for w in WORKSPACE_SOURCES)
        if (ours and diag.kind != "shadowed") or shadow:
            lines.append(f"  - {_code(diag.skill or '')} {md_text(diag.kind)}: "
                         f"{md_text(diag.reason)}")
    return lines


def mcp_skill_lines(session: Session) -> tuple[list[str], list[str]]:
    """Markdown bullets: each workspace MCP server's skills, by name and digest
    (:meth:`~lily_kernel.skills.remote.RemoteSkill.key`, what ``/trust --yes`` records),
    each new, changed since trusted or as trusted; and the names of those held back until
    this review is accepted (docs/loader.md#mcp-roots)."""
    from lily_kernel.skills import remote
    hub = session.mcp
    if hub is None:
        return [], []
    record = session.trust_status().skills
    lines, held = [], []
    for name, server in hub.servers.items():
        if not server.config.from_workspace:
            continue
        where = f"MCP server {_code(name)}"
        if server.state in ("untrusted", "stopped"):
            lines.append(f"- {where}: its skills are listed once the workspace is trusted and "
                         "its servers start; each loads only after /trust has shown it")
        elif server.state == "starting":
            lines.append(f"- {where}: still starting; /trust again lists its skills")
        elif server.state != "ready":
            lines.append(f"- {where}: {md_text(server.state)}; no skills listed")
        for entry in server.skills.entries if server.state == "ready" else ():
            head = f"- {_code(entry.name)} ({where}"
            if entry.error is not None:
                lines.append(f"{head}): refused: {md_text(entry.error)}")
                continue
            key, was = entry.key(), record.get(remote.record_key(name, entry.name))
            state = ("as trusted" if was == key else "new" if was is None else
                     f"changed since it was trusted (was {was[:SHOWN_FINGERPRINT]})")
            if was != key:
                held.append(entry.name)
            lines.append(f"{head}, digest {key[:SHOWN_FINGERPRINT]}): {state}")
    return lines, held


def review(session: Session) -> TrustReview:
    """What ``/trust`` shows: everything trusting the workspace would let it do."""
    workspace = session.workspace
    status = session.trust_status(fresh=True)  # the record as the session reads it
    if session.trust_problem:
        raise ConfigError(session.trust_problem)
    data = read_config_file(workspace)
    where = _code(str(workspace))
    held = session.held_skills()
    remote_lines, remote_held = mcp_skill_lines(session)
    trusted = status.trusted and not held and not remote_held
    if trusted:
        head = f"This workspace ({where}) is trusted as it is now. Trusting covers:"
    elif status.trusted:
        why = ([f"what these skills can do changed since: {', '.join(_code(n) for n in held)}"]
               if held else []) + ([
            "skills of its MCP servers are new or changed since: "
            + ", ".join(_code(n) for n in remote_held)] if remote_held else [])
        head = (f"This workspace ({where}) is trusted, but {'; and '.join(why)}. They are "
                "held back until you review it again. Trusting it would let it:")
    elif status.recorded:
        head = (f"This workspace ({where}) was trusted, but {md_text(status.why())}: it is "
                "untrusted until you review it again. Trusting it would let it:")
    else:
        head = (f"This workspace ({where}) is not trusted. Nothing it ships has been used. "
                "Trusting it would let it:")
    out = [head, ""]
    settings = settings_lines(data, session)
    out += [f"**{CONFIG_FILE}**", "", *(settings or [f"- nothing: there is no {CONFIG_FILE}"
                                                     if not data else "- (no settings)"]), ""]
    hub = session.mcp
    mine = {s.config.name for s in hub.servers.values() if not s.config.from_workspace} \
        if hub is not None else set()
    servers = [line for s in _servers(workspace, data) for line in server_lines(*s) + (
        [f"  - not used: a server named {_code(s[0])} comes from your own configuration, "
         "and a workspace cannot replace it"] if s[0] in mine else [])]
    out += ["**MCP servers** (they start when trusted)", "",
            *(servers or ["- none"]), ""]
    if remote_lines:
        out += ["**Skills of its MCP servers** (each loads as shown here; a change asks "
                "again)", "", *remote_lines, ""]
    skills = skill_lines(session.trusted_preview())
    out += ["**Skills** of its own folders (`skills/`, `.agents/skills`, `.claude/skills`) "
            "that would load", "", *(skills or ["- none"]), ""]
    own = persona_files(workspace, session.persona_dirs, session.environ)
    if own:
        out += ["**Persona** (`persona/`, read into the system prompt only when trusted): "
                + ", ".join(_code(f) for f in own), ""]
    rules = [name for name in RULES_FILES if (workspace / name).is_file()]
    if rules:
        out += ["**Rules files** (read into the system prompt only when trusted): "
                + ", ".join(_code(r) for r in rules), ""]
    fingerprint = session.trust_fingerprint()
    if trusted:
        out.append("`/trust --revoke` undoes it.")
    else:
        short = fingerprint[:SHOWN_FINGERPRINT]
        out.append(f"Nothing was trusted. `/trust --yes` trusts it as shown (or, from another "
                   f"process such as `lily run`, `/trust --yes {short}`); a change that "
                   "starts a process, reaches a network or widens a policy asks again.")
    session.trust_reviewed = fingerprint
    return TrustReview("\n".join(out), fingerprint)


def accept(session: Session, fingerprint: str | None) -> Notice:
    """Trust the workspace as the review with ``fingerprint`` showed it (the card's Trust
    button and ``/trust --yes``); CommandError, nothing trusted, when none was shown or the
    workspace changed since."""
    if fingerprint is None:
        raise CommandError("run /trust first: it shows what this workspace ships; then "
                           "/trust --yes trusts it as shown.")
    try:
        session.apply_trust(True, fingerprint)
    except ConfigError as exc:
        raise command_error(exc) from None
    loaded = [s.name for s in session.snapshot.skills if s.source in WORKSPACE_SOURCES
              or s.source in {f"mcp:{n}" for n in _workspace_servers(session)}]
    skills = ", ".join(_code(n) for n in loaded) or "none"
    unlisted = [n for n, s in _workspace_servers(session).items() if s.state != "ready"]
    later = (f" Any skills its MCP servers serve ({', '.join(_code(n) for n in unlisted)}) "
             "load once a /trust has shown them, when the servers have started (`/mcp`)."
             if unlisted else "")
    return Notice(f"Trusted this workspace ({_code(str(session.workspace))}) as reviewed. "
                  f"Its {CONFIG_FILE} applies, its MCP servers start, and its skills load "
                  f"({skills}).{later} A change that starts a process, reaches a network or "
                  "widens a policy asks again; `/trust --revoke` undoes this.")


def _workspace_servers(session: Session) -> dict[str, Any]:
    """The workspace's MCP servers (name -> Server) in the session's hub."""
    hub = session.mcp
    return {} if hub is None else {n: s for n, s in hub.servers.items()
                                   if s.config.from_workspace}


def named(session: Session, shown: str) -> str:
    """The full fingerprint of the workspace now, when it begins with ``shown`` (what a
    /trust review printed); CommandError, nothing trusted, when it does not."""
    if len(shown) != SHOWN_FINGERPRINT or not _HEX.match(shown):
        raise CommandError(f"/trust --yes takes the {SHOWN_FINGERPRINT}-digit fingerprint "
                           "/trust showed, or nothing after a /trust in this session.")
    session.trust_status(fresh=True)
    if session.trust_problem:
        raise ConfigError(session.trust_problem)
    fingerprint = session.trust_fingerprint()
    if not fingerprint.startswith(shown):
        raise CommandError(f"this workspace changed since /trust showed fingerprint {shown}; "
                           "nothing was trusted. Run /trust again to review it.")
    return fingerprint


def held_back(session: Session) -> str:
    """The sentence a command that loaded the skills adds when it held some back (a skill of
    a trusted workspace that can do more than when trusted), naming each, what it can do
    now, and ``/trust``; '' when none (docs/trust-boundary.md#what-asks-again)."""
    rows = session.skill_snapshot.untrusted() if session.held_skills() else ()
    if not rows:
        return ""
    def now(reason: str) -> str:  # the "(now: ...)" of Untrusted.check's reason
        return reason.partition("(now: ")[2].partition("); /trust reviews it")[0]
    named = "; ".join(f"{_code(d.skill or '')} ({md_text(now(d.reason))})" for d in rows[:5])
    more = f"; and {len(rows) - 5} more (`/skills --all`)" if len(rows) > 5 else ""
    return (f" Held back until `/trust` reviews them (what they can do changed since the "
            f"workspace was trusted): {named}{more}.")


def run(session: Session, args: str) -> TrustReview | Notice:
    """``/trust``, ``/trust --yes [FINGERPRINT]`` or ``/trust --revoke`` against
    ``session``'s workspace."""
    words = args.split()
    if not (args in ("", "--yes", "--revoke") or (len(words) == 2 and words[0] == "--yes")):
        raise CommandError("/trust takes no arguments, --yes [FINGERPRINT] or --revoke.")
    try:
        if args == "--revoke":
            session.apply_trust(False)
            return Notice(f"This workspace is no longer trusted: its {CONFIG_FILE} may not send "
                          "OPENAI_API_KEY or LILY_OUTBOX_TOKEN elsewhere, its MCP servers do "
                          "not start and its own skills do not load. /trust reviews it again.")
        if args == "--yes":
            return accept(session, session.trust_reviewed)
        if words[:1] == ["--yes"]:
            return accept(session, named(session, words[1]))
        return review(session)
    except ConfigError as exc:
        raise command_error(exc) from None
