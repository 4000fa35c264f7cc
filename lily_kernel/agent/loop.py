"""The agent loop: one request, at most one skill, tools under policy (docs/agent.md#the-loop).

``run`` sends persona + skills index + rules + the conversation + the request
to the model, executes the tool calls it makes — ``load_skill`` (the body
from the snapshot, never the disk; the first one declares the request's
skill, a second different one is refused), ``read_skill_file`` (files under
the loaded skill's ``references/``), and the session's registered tools as
the policy allows — and repeats until the model answers without tool calls or
the step budget is spent. Refusals are tool errors the model can read; only
endpoint faults end the request. The conversation is committed only in a
consistent state: every assistant tool call has its result.

A call of a tool the policy puts behind confirmation (``[tools] confirm``,
always ``run_python``) pauses the request: it ends with a card, and the call is
answered when the user decides — :func:`resume` with the tool's result after
Confirm, :func:`decline` ("declined by the user") after Cancel or when a new
request comes first. See docs/notebook-tools.md#confirmation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lily_kernel.agent import prompt as context
from lily_kernel.agent import client as model
from lily_kernel import redaction as secrets
from lily_kernel.agent.workspace_fs import WorkspaceFS, split
from lily_kernel.commands.results import CommandError, SkillRequest
from lily_kernel.session.session import Session
from lily_kernel.agent.tools import ToolError, check_args

MAX_STEPS = 8
DECLINED = "declined by the user"
NOT_RUN = ("Error: not run: an earlier call in this step waits for the user's confirmation; "
           "call it again afterwards if it is still needed")

LOAD_SKILL = {"type": "function", "function": {
    "name": "load_skill",
    "description": "Read a skill's instructions (its SKILL.md body). Call this before using a "
                   "skill; it declares the skill for this request. One skill per request.",
    "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                   "required": ["name"]}}}
READ_SKILL_FILE = {"type": "function", "function": {
    "name": "read_skill_file",
    "description": "Read a file under the loaded skill's references/ folder, e.g. "
                   "'references/guide.md'.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}
PROPOSE_ACTION = {"type": "function", "function": {
    "name": "propose_action",
    "description": "For the loaded typed skill: propose running it with these parameters "
                   "(a JSON object, names and types as the skill declares). Lily validates them "
                   "in code and shows the user a confirmation card; nothing happens before the "
                   "user confirms.",
    "parameters": {"type": "object", "properties": {"parameters": {"type": "object"}},
                   "required": ["parameters"]}}}
READ_CONFIG = {"type": "function", "function": {
    "name": "read_config",
    "description": "For the loaded internal typed skill: read a setting by its dotted path "
                   "(only paths in the skill's Config ACL).",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}
RESERVED = {"load_skill", "read_skill_file", "propose_action", "read_config"}


class AgentError(CommandError):
    """A request to the agent failed; one readable line."""


@dataclass
class Reply:
    text: str
    skill: str | None
    tools_used: list[str] = field(default_factory=list)
    steps: int = 0
    proposal: object = None  # an actions.Action now waiting for the user's confirmation
    usage: dict | None = None  # tokens over the request's model calls, when the endpoint reports them


@dataclass
class Paused:
    """A request stopped at a tool call that waits for the user (kept in the tool Action)."""
    pending: list[dict]  # the request's messages so far; the held call has no result yet
    call_id: str
    skill: str | None
    tools_used: list[str]
    steps: int
    usage: dict | None
    at: int = -1  # where in ``pending`` the held call's result goes (calls answered in order)

    def answered(self, result: str) -> list[dict]:
        """``pending`` with the held call answered by ``result``, in call order."""
        at = len(self.pending) if self.at < 0 else self.at
        return [*self.pending[:at], {"role": "tool", "tool_call_id": self.call_id,
                                     "content": result}, *self.pending[at:]]


class _Request:
    """The state of one request while the loop runs."""

    def __init__(self, session: Session, skill: str | None) -> None:
        self.session = session
        self.skill = skill
        self.tools_used: list[str] = []
        self.proposal = None
        self.cut_results = 0  # tool results cut at [limits] tool_result_chars

    # -- tools offered to the model -----------------------------------------
    def tool_specs(self) -> list[dict]:
        specs = [LOAD_SKILL, READ_SKILL_FILE]
        if any(s.typed is not None for s in self.session.snapshot.skills):
            specs += [PROPOSE_ACTION, READ_CONFIG]
        for tool in self.session.tools:
            if tool.name in RESERVED or self.session.policy.model_refusal(self.session.tools, tool.name):
                continue
            specs.append({"type": "function", "function": {
                "name": tool.name, "description": tool.description or tool.name,
                "parameters": dict(tool.parameters)}})
        return specs

    # -- executing one call ----------------------------------------------------
    def needs_confirmation(self, name: str, args: dict) -> bool:
        """Is this a valid, allowed call of a tool the user must confirm first?"""
        session = self.session
        if name in RESERVED:
            return False
        # An MCP tool asks by default (``ask``, unless in its server's auto_approve).
        if not (session.policy.needs_confirmation(name)
                or getattr(session.tools.get(name), "ask", False)):
            return False
        if session.policy.model_refusal(session.tools, name):
            return False  # refused anyway: execute() answers with the refusal
        if check_args(session.tools.get(name).parameters, args) is not None:
            return False
        from lily_kernel.typed import actions
        blocked = actions.uncertain_block(session)  # an unsure delivery is never replaced
        if blocked:
            raise ToolError(blocked)
        return True

    def execute(self, name: str, args: dict) -> str:
        """The tool result text, capped; refusals and tool failures start with 'Error:'."""
        try:
            return self._cap(self._execute(name, args))
        except ToolError as exc:
            return f"Error: {exc}"

    def _execute(self, name: str, args: dict) -> str:
        if name == "load_skill":
            return self.load_skill(args)
        if name == "read_skill_file":
            return self.read_skill_file(args)
        if name == "propose_action":
            return self.propose_action(args)
        if name == "read_config":
            return self.read_config(args)
        return self.call_tool(name, args)

    def _cap(self, text: str) -> str:
        """Every tool result, built-in or registered, kept to [limits] tool_result_chars
        (docs/limits-and-secrets.md#caps)."""
        cap = self.session.limits.tool_result_chars
        if len(text) <= cap:
            return text
        self.cut_results += 1
        return (text[:cap] + f"\n[… cut: Lily kept the first {cap:,} characters of this "
                "tool result (lily.toml [limits] tool_result_chars) …]")

    def load_skill(self, args: dict) -> str:
        problem = check_args(LOAD_SKILL["function"]["parameters"], args)
        if problem:
            raise ToolError(f"load_skill: {problem}")
        name = args["name"]
        snap = self.session.snapshot
        skill = snap.get(name)
        if skill is None:
            raise ToolError(f"no skill named '{name}' in this session (see the skills index)")
        if skill.disable_model_invocation and self.skill != name:
            raise ToolError(f"skill '{name}' can only be run by the user, with /skill {name}")
        if self.skill is not None and self.skill != name:
            raise ToolError(f"this request already uses skill '{self.skill}'; Lily allows one "
                            f"skill per request, so '{name}' is refused")
        self.skill = name
        note = ""
        if skill.invocation_mode == "tool_dispatch":
            note = (f"\n\n(This skill runs the tool '{skill.command_tool}' with the user's "
                    "input; call it if it is offered to you.)")
        if skill.typed is not None:
            note = ("\n\n(A typed skill: extract the parameters from the request, then call "
                    "propose_action with them. Lily checks them in code and asks the user to "
                    "confirm; do not claim anything was done before that.)")
        return f"# Skill: {name}\n\n{skill.body.strip()}{note}"

    def _typed_skill(self):
        if self.skill is None:
            raise ToolError("load a typed skill with load_skill first")
        skill = self.session.snapshot.get(self.skill)
        if skill is None or skill.typed is None:
            raise ToolError(f"the loaded skill '{self.skill}' is not a typed skill")
        return skill

    def propose_action(self, args: dict) -> str:
        from lily_kernel.typed import actions
        problem = check_args(PROPOSE_ACTION["function"]["parameters"], args)
        if problem:
            raise ToolError(f"propose_action: {problem}")
        skill = self._typed_skill()
        try:
            action = actions.prepare(self.session, skill, args["parameters"])
        except actions.ActionError as exc:
            raise ToolError(str(exc)) from None
        self.session.propose(action)
        self.proposal = action
        return (f"Proposed {skill.name} with {json.dumps(action.params)}. The user now sees a "
                "confirmation card (Confirm / Cancel, or /confirm and /cancel); nothing has "
                "happened yet. Tell the user briefly what will happen once they confirm.")

    def read_config(self, args: dict) -> str:
        problem = check_args(READ_CONFIG["function"]["parameters"], args)
        if problem:
            raise ToolError(f"read_config: {problem}")
        skill = self._typed_skill()
        spec = skill.typed
        scoped = self.session.config.scoped(skill.name, spec.acl_read, spec.acl_write)
        try:
            return json.dumps(scoped.read(args["path"]))
        except (PermissionError, ValueError) as exc:
            raise ToolError(str(exc)) from None

    def read_skill_file(self, args: dict) -> str:
        problem = check_args(READ_SKILL_FILE["function"]["parameters"], args)
        if problem:
            raise ToolError(f"read_skill_file: {problem}")
        if self.skill is None:
            raise ToolError("load a skill with load_skill before reading its files")
        skill = self.session.snapshot.get(self.skill)
        parts = split(args["path"])  # the file boundary, rooted at the skill's references/
        if parts[:1] == ("references",):
            parts = parts[1:]
        refs = WorkspaceFS(Path(skill.path) / "references", name="references",
                           read_bytes=self.session.limits.read_bytes)
        return refs.read("/".join(parts))

    def call_tool(self, name: str, args: dict) -> str:
        session = self.session
        refusal = session.policy.model_refusal(session.tools, name)
        if refusal:
            raise ToolError(refusal)
        tool = session.tools.get(name)
        problem = check_args(tool.parameters, args)
        if problem:
            raise ToolError(f"{name}: {problem}")
        self.tools_used.append(name)
        try:
            value = tool(**args)
        except ToolError:
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the tool's own failure is information for the model
            raise ToolError(f"tool '{name}' raised {type(exc).__name__}: {exc}") from None
        return value if isinstance(value, str) else json.dumps(value, default=str)


def _consistent(messages: list[dict]) -> list[dict]:
    """``messages`` with a result added for any tool call left without one."""
    out = list(messages)
    answered = {m.get("tool_call_id") for m in out if m.get("role") == "tool"}
    for m in messages:
        for call in m.get("tool_calls") or []:
            if call["id"] not in answered:
                out.append({"role": "tool", "tool_call_id": call["id"],
                            "content": "Error: interrupted before this tool ran"})
    return out


def run(session: Session, text: str, skill: SkillRequest | None = None,
        on_text: Callable[[str], None] | None = None,
        on_event: Callable[[str, dict], None] | None = None) -> Reply:
    """Run one request; return the final answer, or raise :class:`AgentError`."""
    decline_waiting(session)  # a new request first: a call still waiting is declined
    env = session.environ
    problem = session.config_error or model.not_configured(env, session.model_config)
    if problem:
        raise AgentError(problem)
    request = _Request(session, skill.skill.name if skill else None)
    user = {"role": "user", "content": skill.prompt if skill else text}
    if request.skill and on_event:
        on_event("skill", {"name": request.skill, "forced": True})
    return _drive(request, [user], 1, None, on_text, on_event)


def resume(session: Session, action, result: str,
           on_text: Callable[[str], None] | None = None,
           on_event: Callable[[str, dict], None] | None = None) -> Reply:
    """Continue a paused request with the confirmed tool call's ``result``."""
    paused: Paused = action.paused
    pending = paused.answered(result)
    problem = session.config_error or model.not_configured(session.environ, session.model_config)
    if problem:
        _commit(session, pending)
        raise AgentError(problem)
    request = _Request(session, paused.skill)
    request.tools_used = [*paused.tools_used, action.tool]
    return _drive(request, pending, min(paused.steps + 1, MAX_STEPS), paused.usage,
                  on_text, on_event)


def decline(session: Session, action, reason: str = DECLINED) -> None:
    """Answer a paused request's held call with ``reason`` and keep the request as it was."""
    _commit(session, action.paused.answered(reason))


def decline_waiting(session: Session) -> None:
    """If a tool call waits for confirmation, settle it as declined by the user."""
    waiting = session.pending
    if waiting is not None and waiting.kind == "tool":
        session.settle(waiting, "declined")
        decline(session, waiting)


def run_confirmed(session: Session, action) -> str:
    """Run the tool call the user confirmed; its result text (errors start with 'Error:')."""
    return _Request(session, action.paused.skill).execute(action.tool, action.args)


def _commit(session: Session, messages: list[dict]) -> None:
    for message in _consistent(messages):
        session.add_message(message)


def _add_usage(total: dict | None, usage: dict | None) -> dict | None:
    if not usage:
        return total
    total = dict(total or {"prompt_tokens": 0, "completion_tokens": 0})
    for key in ("prompt_tokens", "completion_tokens"):
        total[key] += usage.get(key, 0)
    return total


def _drive(request: _Request, pending: list[dict], first_step: int, usage: dict | None,
           on_text: Callable[[str], None] | None,
           on_event: Callable[[str, dict], None] | None) -> Reply:
    """Model steps from ``first_step`` until an answer, a pause or the budget's end."""
    session = request.session
    if session.mcp is not None:  # the MCP servers' current tools (docs/mcp.md#tools)
        session.mcp.sync(session.tools, budget=session.model_config.timeout)
    config = session.model_config
    client = session.model_clients.get(config, session.environ)
    system = {"role": "system",
              "content": context.system_prompt(session.persona, session.snapshot)}
    tools = request.tool_specs()
    emit = on_event or (lambda kind, data: None)

    def commit(messages: list[dict]) -> None:
        _commit(session, messages)

    turn_start = len(pending)
    try:
        for step in range(first_step, MAX_STEPS + 1):
            turn_start = len(pending)
            emit("waiting", {"model": config.model, "step": step})  # a face may show a timer
            turn = model.complete(client, config, [system, *session.conversation, *pending],
                                  tools, on_text, max_chars=session.limits.answer_chars)
            usage = _add_usage(usage, turn.usage)
            session.add_usage(turn.usage)
            pending.append(turn.message())
            if not turn.tool_calls:
                if turn.finish_reason == "length":
                    turn.content += ("\n\n*(The model stopped at its length limit; the answer "
                                     "may be cut short.)*")
                    pending[-1] = turn.message()
                commit(pending)
                shown = turn.content
                if request.cut_results:  # the user is told; the model saw the marker
                    n = request.cut_results
                    shown += (f"\n\n*({n} tool result{'s were' if n != 1 else ' was'} cut at "
                              f"{session.limits.tool_result_chars:,} characters: lily.toml "
                              "[limits] tool_result_chars.)*")
                return Reply(shown, request.skill, request.tools_used, step,
                             request.proposal, usage)
            held = None
            for call in turn.tool_calls:
                before = request.skill
                args = call.parsed()
                try:
                    confirm_first = held is None and request.needs_confirmation(call.name, args)
                except ToolError as exc:
                    confirm_first, result = False, f"Error: {exc}"
                else:
                    result = None
                if confirm_first:
                    held = (call, args, len(pending))
                    emit("tool", {"name": call.name, "ok": True, "waiting": True})
                    continue
                if result is None:
                    result = NOT_RUN if held is not None else request.execute(call.name, args)
                pending.append({"role": "tool", "tool_call_id": call.id, "content": result})
                if request.skill != before:
                    emit("skill", {"name": request.skill, "forced": False})
                emit("tool", {"name": call.name, "ok": not result.startswith("Error:")})
            if held is not None:
                from lily_kernel.typed import actions
                call, args, at = held
                paused = Paused(pending, call.id, request.skill, list(request.tools_used),
                                step, usage, at)
                action = actions.hold_tool(session, call.name, args, paused)
                session.propose(action)
                return Reply(turn.content, request.skill, request.tools_used, step, action, usage)
        commit(pending)
        raise AgentError(f"stopped after {MAX_STEPS} model steps without a final answer; "
                         "the tool results so far are kept in the conversation")
    except model.ModelError as exc:
        del pending[turn_start:]  # a faulty turn (e.g. invalid tool-call JSON) is not kept
        if len(pending) > 1:  # tools ran before it: keep what happened, consistently
            commit(pending)
        raise AgentError(secrets.redact(str(exc), session.environ)) from None
    except KeyboardInterrupt:
        if len(pending) > 1:
            commit(pending)
        raise
