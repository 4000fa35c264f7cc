"""The deterministic command router (docs/commands.md).

A cell whose first non-blank line starts with ``/`` is a command. The name
must match a built-in or a snapshot alias exactly; the rest of the first line
is the arguments and the following lines are the body. Results are data
(:mod:`lily_kernel.commands.results`); failures raise :class:`CommandError` with one
readable line. Nothing here calls a model.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from lily_kernel.agent import pending
from lily_kernel.commands import table
from lily_kernel.commands.results import (
    ActionDone,
    AgentList,
    CompactRequest,
    LogsView,
    McpStatus,
    ModelInfo,
    Notice,
    SkillRequest,
    SkillTable,
    ToolOutput,
)
from lily_kernel.errors import (
    ActionError,
    CommandError,
    ConfigError,
    LogsError,
    PersonaError,
    ToolError,
    command_error,
    error_line,
)
from lily_kernel.session.session import Session
from lily_kernel.settings.model_settings import SECRET_KEYS
from lily_kernel.skills.skill import Skill
from lily_kernel.tools import gate
from lily_kernel.tools.tool_registry import Tool

log = logging.getLogger(__name__)

_SECRET_RE = re.compile(r"\b(" + "|".join(SECRET_KEYS) + r")=\S+", re.IGNORECASE)


@dataclass(frozen=True)
class Command:
    """A parsed command cell: the name, the rest of the first line and the body."""
    name: str
    args: str
    body: str
    line: str  # the first line, as typed (stripped)

    @property
    def input(self) -> str:
        """Arguments and body together: the input of a skill."""
        return "\n".join(part for part in (self.args, self.body) if part.strip())


def parse(cell: str) -> Command | None:
    """The command in ``cell``, or None when the cell is not a command."""
    lines = cell.split("\n")
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("/"):
            return None
        head, _, args = line[1:].partition(" ")
        body = "\n".join(lines[i + 1:]).strip("\n")
        return Command(head.strip(), args.strip(), body, line)
    return None


def redact(line: str) -> str:
    """A command line without the secrets a command itself may carry.

    ``/model`` keeps only the model name and known settings; every other value is
    masked (``key=***``), whatever its spelling. Other commands lose the values of
    secret-looking ``key=value`` pairs. URL userinfo and live secret values are masked
    once, where the line is stored (``Session.record_command``, docs/commands.md#redaction).
    """
    head, _, rest = line.partition(" ")
    if head != "/model":
        return _SECRET_RE.sub(lambda m: f"{m.group(1)}=***", line)
    from lily_kernel.settings.model_settings import ModelConfig
    known = {f for f in ModelConfig.__dataclass_fields__}
    kept = []
    for i, token in enumerate(rest.split()):
        key, eq, _ = token.partition("=")
        if (eq and key in known) or (not eq and i == 0):
            kept.append(token)
        else:
            kept.append(f"{key}=***" if eq else "***")
    return " ".join([head, *kept])


def execute(session: Session, cmd: Command) -> Any:
    """Run the parsed command ``cmd`` against ``session``; the command is journaled."""
    log.debug("command /%s", cmd.name)
    try:
        result = _dispatch(session, cmd)
    except CommandError as exc:
        session.record_command(redact(cmd.line), ok=False, error=error_line(exc))
        raise
    session.record_command(redact(cmd.line), ok=True)
    return result


def _dispatch(session: Session, cmd: Command) -> Any:
    handler = _HANDLERS.get(cmd.name)
    if handler is not None:
        return handler(session, cmd)
    snap = session.snapshot
    if cmd.name in snap.alias_clashes:
        owners = snap.alias_clashes[cmd.name]
        raise CommandError(
            f"/{cmd.name} is claimed by skills {', '.join(owners[:-1])} and {owners[-1]}, so the "
            f"alias is disabled; use {' or '.join(f'/skill {o}' for o in owners)}.")
    if cmd.name in snap.aliases:
        skill = snap.skill(snap.aliases[cmd.name])
        _user_may_run(skill, f"/{cmd.name}")
        return _invoke(session, skill, cmd.input)
    if not cmd.name:
        raise CommandError("unknown command /: a command needs a name right after '/'. "
                           "Run /help for the list of commands.")
    if cmd.name in snap.excluded_aliases:  # e.g. /fix in `lily run`, where no notebook is
        name = snap.excluded_aliases[cmd.name]
        diag = snap.exclusion(name)
        why = diag.reason if diag else "it is excluded"
        raise CommandError(f"/{cmd.name} runs the skill '{name}', which is not available "
                           f"here: {why}.")
    broken = _broken_alias(snap, cmd.name)
    if broken is not None:
        raise CommandError(f"/{cmd.name} is the command of skill '{broken.skill}', which is "
                           f"excluded: {broken.reason}. Fix it, then /reload_skills "
                           "(/skills --all lists excluded skills).")
    raise CommandError(f"unknown command /{cmd.name}. Run /help for the list of commands.")


def _broken_alias(snap: Any, name: str) -> Any:
    """The diagnostic of an excluded skill whose SKILL.md names ``name`` as its ``command``
    (a skill that failed to parse has no alias in the snapshot: its file is scanned)."""
    import re
    from pathlib import Path
    wanted = re.compile(rf"^command:\s*[\"']?/?{re.escape(name)}[\"']?\s*$", re.M)
    for diag in snap.excluded():
        if diag.kind != "skill_error" or not diag.path:
            continue
        path = Path(diag.path)
        path = path if path.name == "SKILL.md" else path / "SKILL.md"
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(16_384)
        except OSError:
            continue
        if wanted.search(head):
            return diag
    return None


# -- handlers ------------------------------------------------------------------

def _skills(session: Session, cmd: Command) -> Any:
    if cmd.args not in ("", "--all"):
        raise CommandError(f"/skills takes no arguments but --all, not '{cmd.args}'.")
    return SkillTable(session.snapshot, show_all=cmd.args == "--all")


def _skill(session: Session, cmd: Command) -> Any:
    name, _, rest = cmd.args.partition(" ")
    if not name:
        raise CommandError("/skill requires a skill name.")
    skill = _lookup(session, name)
    _user_may_run(skill, f"/skill {name}")
    return _invoke(session, skill, "\n".join(p for p in (rest.strip(), cmd.body) if p.strip()))


def _lookup(session: Session, name: str) -> Skill:
    snap = session.snapshot
    skill = snap.get(name)
    if skill is not None:
        return skill
    excluded = snap.exclusion(name)
    if excluded is not None:
        raise CommandError(f"skill '{name}' is excluded from this session's snapshot "
                           f"(version {snap.version}): {excluded.reason}.")
    raise CommandError(f"no skill named '{name}' in this session's snapshot (version {snap.version}).")


def _user_may_run(skill: Skill, how: str) -> None:
    """Refuse a skill its author marked ``user-invocable: false`` (the model's only)."""
    if not skill.user_invocable:
        raise CommandError(f"{how}: skill '{skill.name}' is not for running by hand "
                           "(user-invocable: false); the model loads it when a request needs "
                           "it, so ask in prose instead.")


def _invoke(session: Session, skill: Skill, text: str) -> Any:
    if skill.typed is not None:
        from lily_kernel.typed import actions
        try:
            values = actions.parse_json_params(text)
            if values is None:  # natural language: the model extracts, Lily confirms
                return SkillRequest(skill, text)
            action = actions.prepare(session, skill, values)  # every required parameter, valid
            outcome = actions.execute_now(session, action)  # uncertain: held pending
        except ActionError as exc:
            raise command_error(exc) from None
        session.settle(action, "executed")
        return ActionDone(action, outcome.summary)
    if skill.invocation_mode == "tool_dispatch":
        tool = session.tools.get(skill.command_tool or "")
        args = {_first_parameter(tool): text} if tool is not None and tool.takes_arguments \
            else {}
        said = gate.decide(session, skill.command_tool or "", args, gate.Route.DISPATCH)
        if tool is None or not isinstance(said, gate.Runs):
            reason = said.reason if isinstance(said, gate.Refused | gate.Asks) else "not run"
            raise CommandError(f"skill '{skill.name}' cannot run: {reason}.")
        try:
            value = tool(text) if tool.takes_arguments else tool()  # no schema, no pydantic
        except ToolError as exc:
            raise CommandError(f"{skill.command_tool}: {exc}") from None
        except Exception as exc:  # a tool's own bug fails the cell, not the kernel
            raise CommandError(f"tool '{skill.command_tool}' failed: "
                               f"{type(exc).__name__}: {exc}") from None
        return ToolOutput(skill.name, skill.command_tool or "", value)
    if skill.path in session.snapshot.held:  # an MCP server's: its body read and verified now
        from dataclasses import replace

        from lily_kernel.tools.mcp.mcp_skills import read_for_model
        try:
            skill = replace(skill, body=read_for_model(session, skill.path, None))
        except ValueError as exc:
            raise CommandError(f"skill '{skill.name}' is refused: {exc}") from None
    return SkillRequest(skill, text)


def _first_parameter(tool: Tool) -> str:
    """The name of the parameter a ``tool_dispatch`` skill's text goes to (the first)."""
    import inspect
    return next(iter(inspect.signature(tool.func).parameters), "")


def _help(session: Session, cmd: Command) -> Any:
    from lily_kernel.commands.help import command_help, commands_page, skill_help
    topic = cmd.args
    if not topic:
        return commands_page(session.snapshot, session.permissions.mode.value)
    snap = session.snapshot
    if topic.startswith("/"):
        name = topic[1:]
        if name in table.BY_NAME:
            return command_help(table.BY_NAME[name])
        if name in snap.aliases:
            return skill_help(snap, snap.skill(snap.aliases[name]))
        raise CommandError(f"unknown command {topic}. Run /help for the list of commands.")
    skill = snap.get(topic)
    if skill is not None:
        return skill_help(snap, skill)
    if topic in table.BY_NAME:
        return command_help(table.BY_NAME[topic])
    if topic in snap.aliases:
        return skill_help(snap, snap.skill(snap.aliases[topic]))
    _lookup(session, topic)  # raises the right "excluded" / "no skill" error
    raise AssertionError("unreachable")


def _agent(session: Session, cmd: Command) -> Any:
    if cmd.args:
        try:
            session.switch_agent(cmd.args)
        except PersonaError:
            raise CommandError(f"no agent named '{cmd.args}'. Run /agent for the list of "
                               "agents.") from None
    from lily_kernel.agent import workspace_rules
    rules = tuple(f"{f.name}: " + (f"applies ({f.chars:,} characters{', cut' if f.why else ''})"
                                   if f.applies else f.why)
                  for f in workspace_rules.read(session.workspace, session.environ).files)
    return AgentList(tuple(session.agents()), session.active_agent, switched=bool(cmd.args),
                     rules=rules)


def _reload_skills(session: Session, cmd: Command) -> Any:
    _no_args(cmd)
    from lily_kernel.errors import LoaderError
    try:
        snap = session.reload_skills()
    except LoaderError as exc:
        raise CommandError(f"{exc}; the previous snapshot (version "
                           f"{session.snapshot.version}) stays in use.") from None
    excluded = len(snap.excluded())
    from lily_kernel.commands.trust import held_back  # names what it held back, and /trust
    held = held_back(session)  # a trusted workspace's skills that can do more: named there
    skipped = [] if held else sorted({d.skill or "?" for d in snap.untrusted()})
    return Notice(f"Reloaded skills: snapshot version {snap.version}, "
                  f"{len(snap.skills)} skill{'s' if len(snap.skills) != 1 else ''}"
                  + (f", {excluded} excluded (see /skills --all)." if excluded else ".")
                  + (f" Not loaded, as this workspace is not trusted: {', '.join(skipped)}; "
                     "/trust shows what it ships, then /trust --yes loads them." if skipped else "")
                  + held)


def _reload_persona(session: Session, cmd: Command) -> Any:
    _no_args(cmd)
    persona = session.reload_persona()
    names = ", ".join(f.name + (" (truncated)" if f.truncated else "") for f in persona.files)
    return Notice(f"Reloaded the persona of agent **{persona.agent}**: {names or 'no files'}.")


def _new(session: Session, cmd: Command) -> Any:
    _no_args(cmd)
    session.renew()
    return Notice(f"New session `{session.session_id[:12]}`: snapshot version "
                  f"{session.snapshot.version}, empty conversation.")


def _prompt_parts(session: Session) -> dict[str, Any]:
    """Token counts of a request's fixed parts (docs/agent.md#context-budget)."""
    from lily_kernel.agent import budget, prompt, request
    system = "\n\n".join([session.persona.system_text().strip(), prompt.RULES])
    return budget.parts(session.model_config,
                        {"system": system, "skills index": prompt.skills_index(session.snapshot)},
                        request.offered_tools(session), session.budget,
                        source=session.window_source)


def _sent(session: Session) -> tuple[tuple[str, str], ...]:
    """What every request sends besides the conversation (docs/agent.md#model-client)."""
    from lily_kernel.agent import budget, model_client
    config = session.model_config
    cap = budget.reserve_of(config, budget.window_of(config))
    return tuple(model_client.sent_settings(config, cap))


def _model(session: Session, cmd: Command) -> Any:
    if not cmd.args:
        from lily_kernel.agent import endpoint_info
        note = endpoint_info.model_note(session)
        endpoint_info.learn_window(session)
        info = endpoint_info.of_session(session)
        return ModelInfo(session.model_config.as_shown(), notes=(note,) if note else (),
                         usage=dict(session.usage) if session.usage["calls"] else None,
                         parts=_prompt_parts(session), models=info.models if info else None,
                         mode=session.permissions.mode.value, sent=_sent(session))
    values: dict[str, str] = {}
    for token in cmd.args.split():
        if "=" in token:
            key, _, value = token.partition("=")
            values[key] = value
        elif "model" in values:
            raise CommandError(f"/model takes one model name; '{token}' is a second one.")
        else:
            values["model"] = token
    try:
        session.set_model(**values)
    except ConfigError as exc:
        raise command_error(exc) from None
    return ModelInfo(session.model_config.as_shown(), changed=tuple(values),
                     mode=session.permissions.mode.value, sent=_sent(session))


def _mode(session: Session, cmd: Command) -> Any:
    from lily_kernel.commands import policy
    return policy.mode(session, cmd.args)


def _policy(session: Session, cmd: Command) -> Any:
    _no_args(cmd)
    from lily_kernel.commands import policy
    return policy.show(session)


def _rewind(session: Session, cmd: Command) -> Any:
    from lily_kernel.commands import conversation
    return conversation.rewind(session, cmd.args)


def _fork(session: Session, cmd: Command) -> Any:
    from lily_kernel.commands import conversation
    return conversation.fork(session, cmd.args)


def _trust(session: Session, cmd: Command) -> Any:
    from lily_kernel.commands import trust
    return trust.run(session, cmd.args)


def _confirm(session: Session, cmd: Command) -> ActionDone:
    words = cmd.args.split()
    always = "--always" in words
    refs = [w for w in words if w != "--always"]
    if len(refs) > 1 or any(r.startswith("-") for r in refs):
        raise CommandError(f"/{cmd.name} takes a card's id and, for /confirm, --always; "
                           f"not '{cmd.args}'.")
    return decide(session, refs[0] if refs else None, ok=cmd.name == "confirm", always=always)


def decide(session: Session, ref: str | None, ok: bool, always: bool = False,
           route: gate.Route = gate.Route.CONFIRM) -> ActionDone:
    """Confirm (``ok``) or cancel the card ``ref`` names (None: the one waiting) — the one
    decide path for ``/confirm``, ``/cancel``, a card's buttons and an ACP client's
    permission reply (``agent/pending.decide``, where the gate decides the call again: the
    MCP servers' tools are brought up to date first, so a tool redefined since the card is
    seen)."""
    if ok and session.mcp is not None and isinstance(session.pending, pending.HeldCall):
        session.mcp.sync(session.tools, budget=session.model_config.timeout)
    try:
        decision = pending.decide(session, ref, ok, always, route)
    except ActionError as exc:
        raise command_error(exc) from None
    return ActionDone(decision.item, decision.summary, decision.result, decision.display,
                      decision.outcome)


def _compact(session: Session, cmd: Command) -> Any:
    _no_args(cmd)
    return CompactRequest()  # the runner asks the model (the router never does)


def _logs(session: Session, cmd: Command) -> Any:
    """``/logs [N]`` and ``/logs export [FILE]``: this session's journal (docs/logs.md#notebook)."""
    from lily_kernel.commands import logs_export
    from lily_kernel.session import logs
    if session.journal.path is None:
        raise CommandError("this session keeps no journal, so /logs has nothing to show.")
    read = logs.Logs(session.workspace, session.environ)
    records = read.by_session.get(session.session_id, [])
    summary = (read.summary(session.session_id) if records
               else logs.summarize(session.session_id, records))
    cells = [t for t in logs.turns(records) if t.is_cell]
    word, _, rest = cmd.args.partition(" ")
    if word == "export":
        if records:  # an export refuses a journal edited under the kernel (docs/logs.md#hash-chain)
            try:
                read.checked(session.session_id)
            except LogsError as exc:
                raise CommandError(str(exc)) from None
        rel = logs_export.in_workspace(session, rest.strip()
                                       or f"lily-session-{session.session_id[:12]}.md")
        text = (logs_export.notebook_json(logs_export.notebook(summary, cells))
                if rel.endswith(".ipynb") else logs_export.markdown(summary, logs.turns(records)))
        logs_export.write_for_user(session, rel, text)
        return Notice(f"Wrote this session's transcript ({len(cells)} cells) to "
                      f"`{session.workspace / rel}`.")
    try:
        n = int(word) if word else 10
    except ValueError:
        raise CommandError(f"/logs takes a number of cells or 'export', not '{cmd.args}'.") from None
    if n < 1:
        raise CommandError("/logs N needs N of 1 or more.")
    first = max(0, len(cells) - n)
    rows = tuple(
        (str(i + 1), t.kind + ("" if t.ok else " (failed)"), _clip(t.text, 60),
         _clip(" ".join(t.answers) or "; ".join(t.errors), 80),
         ", ".join(c.name for c in t.calls),
         "" if t.tokens_in is None else f"{t.tokens_in:,} / {t.tokens_out or 0:,}")
        for i, t in enumerate(cells) if i >= first)
    return LogsView(summary.as_dict(), rows, len(rows), len(cells))


def _clip(text: str, width: int) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[:width - 1] + "…"


def _mcp(session: Session, cmd: Command) -> Any:
    words = cmd.args.split()
    if words and (words[0] != "restart" or len(words) != 2):
        raise CommandError("usage: /mcp, or /mcp restart NAME.")
    changes = session.reload_mcp()  # lily.toml and .mcp.json as they are now
    hub = session.mcp
    restarted = None
    if words:
        if hub is None or words[1] not in hub.servers:
            raise CommandError(f"no MCP server named '{words[1]}'. Run /mcp for the list.")
        if not any(line.startswith(f"'{words[1]}' ") for line in changes):
            hub.restart(words[1])  # (a server whose configuration changed just started)
        restarted = words[1]
    if hub is None:
        return McpStatus((), changes=tuple(changes))
    hub.sync(session.tools)  # a server still starting is waited for (at most START_TIMEOUT)
    words_of = {gate.Runs: "auto", gate.Sandboxed: "auto", gate.Asks: "approval",
                gate.Refused: "denied"}
    rows = hub.status(session.tools, session.policy, lambda tool: words_of[
        type(gate.decide(session, tool.name, {}, gate.Route.MODEL))])
    return McpStatus(tuple(rows), tuple(hub.problems), restarted, tuple(changes))


def _no_args(cmd: Command) -> None:
    if cmd.args:
        raise CommandError(f"/{cmd.name} takes no arguments.")


_HANDLERS = {
    "skills": _skills,
    "skill": _skill,
    "help": _help,
    "agent": _agent,
    "reload_skills": _reload_skills,
    "reload_persona": _reload_persona,
    "new": _new,
    "rewind": _rewind,
    "fork": _fork,
    "model": _model,
    "trust": _trust,
    "compact": _compact,
    "logs": _logs,
    "mcp": _mcp,
    "mode": _mode,
    "policy": _policy,
    "confirm": _confirm,
    "cancel": _confirm,
}
assert set(_HANDLERS) == table.BUILTIN_NAMES
