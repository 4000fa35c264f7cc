"""The agent loop: one request, at most one skill, tools under policy (SPEC §7).

``run`` sends persona + skills index + rules + the conversation + the request
to the model, executes the tool calls it makes — ``load_skill`` (the body
from the snapshot, never the disk; the first one declares the request's
skill, a second different one is refused), ``read_skill_file`` (files under
the loaded skill's ``references/``), and the session's registered tools as
the policy allows — and repeats until the model answers without tool calls or
the step budget is spent. Refusals are tool errors the model can read; only
endpoint faults end the request. The conversation is committed only in a
consistent state: every assistant tool call has its result.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lily_kernel.agent import prompt as context
from lily_kernel.agent import client as model
from lily_kernel.agent.builtin_tools import confine
from lily_kernel.commands.results import CommandError, SkillRequest
from lily_kernel.session.session import Session
from lily_kernel.agent.tools import ToolError, check_args

MAX_STEPS = 8
MAX_RESULT_CHARS = 20_000

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


class _Request:
    """The state of one request while the loop runs."""

    def __init__(self, session: Session, skill: str | None) -> None:
        self.session = session
        self.skill = skill
        self.tools_used: list[str] = []
        self.proposal = None

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
    def execute(self, name: str, args: dict) -> str:
        """The tool result text; refusals and tool failures start with 'Error:'."""
        try:
            if name == "load_skill":
                return self.load_skill(args)
            if name == "read_skill_file":
                return self.read_skill_file(args)
            if name == "propose_action":
                return self.propose_action(args)
            if name == "read_config":
                return self.read_config(args)
            return self.call_tool(name, args)
        except ToolError as exc:
            return f"Error: {exc}"

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
        rel = args["path"]
        refs = os.path.join(skill.path, "references")
        if not rel.replace("\\", "/").startswith("references/"):
            rel = "references/" + rel
        target = confine(Path(skill.path), rel)
        real_refs = os.path.realpath(refs)
        if os.path.commonpath([real_refs, str(target)]) != real_refs:
            raise ToolError(f"'{args['path']}' is not under the skill's references/ folder")
        try:
            return target.read_text(encoding="utf-8", errors="replace")[:MAX_RESULT_CHARS]
        except OSError as exc:
            raise ToolError(f"cannot read '{args['path']}': {exc.strerror or exc}") from None

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
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[… cut at {MAX_RESULT_CHARS} characters …]"
        return text


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
    env = session.environ
    problem = session.config_error or model.not_configured(env, session.model_config)
    if problem:
        raise AgentError(problem)
    config = session.model_config
    client = session.model_clients.get(config, env)

    request = _Request(session, skill.skill.name if skill else None)
    user = {"role": "user", "content": skill.prompt if skill else text}
    system = {"role": "system",
              "content": context.system_prompt(session.persona, session.snapshot)}
    pending: list[dict] = [user]
    tools = request.tool_specs()
    emit = on_event or (lambda kind, data: None)
    if request.skill:
        emit("skill", {"name": request.skill, "forced": True})

    def commit(messages: list[dict]) -> None:
        for message in _consistent(messages):
            session.add_message(message)

    turn_start = len(pending)
    try:
        for step in range(1, MAX_STEPS + 1):
            turn_start = len(pending)
            emit("waiting", {"model": config.model, "step": step})  # a face may show a timer
            turn = model.complete(client, config, [system, *session.conversation, *pending],
                                  tools, on_text)
            pending.append(turn.message())
            if not turn.tool_calls:
                if turn.finish_reason == "length":
                    turn.content += ("\n\n*(The model stopped at its length limit; the answer "
                                     "may be cut short.)*")
                    pending[-1] = turn.message()
                commit(pending)
                return Reply(turn.content, request.skill, request.tools_used, step,
                             request.proposal)
            for call in turn.tool_calls:
                before = request.skill
                result = request.execute(call.name, call.parsed())
                pending.append({"role": "tool", "tool_call_id": call.id, "content": result})
                if request.skill != before:
                    emit("skill", {"name": request.skill, "forced": False})
                emit("tool", {"name": call.name, "ok": not result.startswith("Error:")})
        commit(pending)
        raise AgentError(f"stopped after {MAX_STEPS} model steps without a final answer; "
                         "the tool results so far are kept in the conversation")
    except model.ModelError as exc:
        del pending[turn_start:]  # a faulty turn (e.g. invalid tool-call JSON) is not kept
        if len(pending) > 1:  # tools ran before it: keep what happened, consistently
            commit(pending)
        raise AgentError(str(exc)) from None
    except KeyboardInterrupt:
        if len(pending) > 1:
            commit(pending)
        raise
