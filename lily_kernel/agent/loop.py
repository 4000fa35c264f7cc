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

A call the user must approve (``agent/pending.asks``: ``run_python`` always, a
tool marked ``ask`` or listed in ``[tools] confirm``, a ``write`` over an existing
file) pauses the request: it ends with a card, and the call is answered when the
user decides (``agent/pending.decide``) — :func:`resume` goes on with the tool's
result after Confirm; Cancel, or a new request first, answers it "declined by the
user". See docs/notebook-tools.md#confirmation.
"""
from __future__ import annotations

import html
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lily_kernel import redaction
from lily_kernel.agent import client, lean, pending, prompt
from lily_kernel.agent.limits import Limits
from lily_kernel.agent.pending import DECLINED, HeldCall, Paused, PendingItem
from lily_kernel.agent.tools import check_args, invoke
from lily_kernel.agent.workspace_fs import WorkspaceFS, split
from lily_kernel.errors import ActionError, AgentError, ModelError, ToolError
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.substitution import with_skill_dir

if TYPE_CHECKING:
    from lily_kernel.commands.results import SkillRequest
    from lily_kernel.session.session import (
        Session,  # type hints only: agent sits below session and commands
    )


log = logging.getLogger(__name__)

MAX_STEPS = 8
WITHDRAWN = ("Error: not run: the request ended before the user saw this proposal; nothing "
             "waits for confirmation")
__all__ = ["DECLINED", "AgentError", "Reply", "decline", "resume", "run"]
NOT_RUN = ("Error: not run: an earlier call in this step waits for the user's confirmation; "
           "call it again afterwards if it is still needed")


def too_many(limits: Limits) -> str:
    """The answer to a tool call past a cap (docs/trust-boundary.md#caps)."""
    return (f"Error: not run: too many calls (at most {limits.tool_calls_per_step} per step, "
            f"and {limits.conversation_chars:,} characters of conversation per request: "
            "lily.toml [limits] tool_calls_per_step, conversation_chars)")

def _one_argument(name: str, description: str, argument: str,
                  kind: str = "string") -> dict[str, Any]:
    """A built-in tool's schema: one required argument of JSON type ``kind``."""
    return lean.spec(name, description, {"type": "object",
                                         "properties": {argument: {"type": kind}},
                                         "required": [argument]})


LOAD_SKILL = _one_argument("load_skill", "Read a skill's instructions before using it.", "name")
READ_SKILL_FILE = _one_argument("read_skill_file", "Read a file of the loaded skill, e.g. "
                                "references/guide.md.", "path")
PROPOSE_ACTION = _one_argument("propose_action", "Propose parameters for the loaded typed "
                               "skill; the user confirms.", "parameters", "object")
READ_CONFIG = _one_argument("read_config", "Read a setting (dotted path) of the loaded typed "
                            "skill.", "path")
RESERVED = {"load_skill", "read_skill_file", "propose_action", "read_config"}


@dataclass
class Reply:
    """One request's end: the answer, and what it used."""

    text: str
    skill: str | None
    tools_used: list[str] = field(default_factory=list)
    steps: int = 0
    proposal: PendingItem | None = None  # offered: pending once the face shows its card
    usage: dict[str, Any] | None = None  # tokens over the request's model calls, when the endpoint reports them
    shown: list[object] = field(default_factory=list)  # what tools returned for the face
    left_out: tuple[int, int] = (0, 0)  # (earlier turns not sent, results shortened): budget.Fitted


#: Per session (by id; the entry holds its snapshot, policy and tool registry): the last
#: offered tool list and what it was built from (the active skill, the registry's version).
_SPECS_CACHE: dict[int, tuple[tuple[object, ...], str | None, int, list[dict[str, Any]]]] = {}
#: The last system message built and what it was built from (persona, snapshot).
_SYSTEM_CACHE: list[tuple[object, object, dict[str, Any]]] = []


def system_message(session: Session) -> dict[str, Any]:
    """The system message for ``session`` now: the same dict while its persona and snapshot
    are the same objects (both frozen), so neither the skills index nor its token count is
    rebuilt per request. Callers never change it."""
    persona, snap = session.persona, session.snapshot
    for cached_persona, cached_snap, message in _SYSTEM_CACHE:
        if cached_persona is persona and cached_snap is snap:
            return message
    message = {"role": "system", "content": prompt.system_prompt(persona, snap)}
    _SYSTEM_CACHE[:] = [(persona, snap, message), *_SYSTEM_CACHE[:7]]
    return message


class _Request:
    """The state of one request while the loop runs."""

    def __init__(self, session: Session, skill: str | None) -> None:
        self.session = session
        self.skill = skill
        self.tools_used: list[str] = []
        self.proposal: PendingItem | None = None
        self.proposal_call: str | None = None  # the propose_action call that offered it
        self.shown: list[object] = []  # what tools returned for the face (a proposed cell)
        self.cut_results = 0  # tool results cut at [limits] tool_result_chars

    # -- tools offered to the model -----------------------------------------
    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools offered: only those usable now (docs/agent.md#a-lean-prompt).

        The same list object while nothing it depends on changed (the snapshot, the active
        skill, the policy, the registered tools): built once, not per request, and the token
        counter's cache knows it by identity. Callers never change it."""
        session = self.session
        key = (session.snapshot, session.policy, session.tools)
        hit = _SPECS_CACHE.get(id(session))
        if hit is not None and hit[1] == self.skill and hit[2] == session.tools.version and \
                all(a is b for a, b in zip(hit[0], key, strict=True)):
            return hit[3]
        specs = self._build_specs()
        if len(_SPECS_CACHE) > 8:  # a bound: a process rarely runs more sessions at once
            _SPECS_CACHE.clear()
        # the entry holds the session's objects alive, so no id is reused while it is kept
        _SPECS_CACHE[id(session)] = (key, self.skill, session.tools.version, specs)
        return specs

    def _build_specs(self) -> list[dict[str, Any]]:
        session = self.session
        specs = [LOAD_SKILL, *lean.builtin_specs(session.snapshot, self.skill,
                                                 READ_SKILL_FILE, PROPOSE_ACTION, READ_CONFIG)]
        for tool in session.tools:
            if tool.name in RESERVED or session.policy.model_refusal(session.tools, tool.name):
                continue
            specs.append(lean.spec(tool.name, tool.description, tool.parameters))
        return [s for s in specs if session.policy.offered(s["function"]["name"])]

    # -- executing one call ----------------------------------------------------
    def needs_confirmation(self, name: str, args: dict[str, Any]) -> bool:
        """Is this a valid, allowed call the user must approve first (``pending.asks``)?
        While another item waits, it is refused (a :class:`ToolError`): never replaced."""
        session = self.session
        tool = session.tools.get(name)
        if name in RESERVED or tool is None or session.policy.model_refusal(session.tools, name):
            return False  # refused anyway: execute() answers with the refusal
        if check_args(tool.parameters, args) is not None:
            return False
        if not pending.asks(session, tool, args):
            return False
        refusal = pending.waiting_refusal(session, self.proposal)
        if refusal:
            raise ToolError(refusal)
        return True

    def execute(self, name: str, args: dict[str, Any]) -> str:
        """The tool result text, redacted then capped; refusals and tool failures start with
        'Error:'. Every result and error passes the live-secret redaction before it reaches
        the endpoint, the journal or the screen (docs/limits-and-secrets.md#secrets)."""
        env = self.session.environ
        try:
            return self._cap(redaction.redact(self._execute(name, args), env))
        except ToolError as exc:
            return redaction.redact(f"Error: {exc}", env)

    def _execute(self, name: str, args: dict[str, Any]) -> str:
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
        text, cut = pending.cap(text, self.session.limits.tool_result_chars)
        self.cut_results += cut
        return text

    def load_skill(self, args: dict[str, Any]) -> str:
        problem = check_args(LOAD_SKILL["function"]["parameters"], args)
        if problem:
            raise ToolError(f"load_skill: {problem}")
        name = args["name"]
        snap = self.session.snapshot
        skill = snap.get(name)
        if skill is None:
            raise ToolError(f"no skill named '{name}' in this session (the skills index and its "
                            "note name every skill you may load)")
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
        body = with_skill_dir(skill.body.strip(), skill.path)  # docs/skills-compat.md#claude-code-conventions
        return f"# Skill: {name}\n\n{body}{note}"

    def _typed_skill(self) -> Skill:
        if self.skill is None:
            raise ToolError("load a typed skill with load_skill first")
        skill = self.session.snapshot.get(self.skill)
        if skill is None or skill.typed is None:
            raise ToolError(f"the loaded skill '{self.skill}' is not a typed skill")
        return skill

    def propose_action(self, args: dict[str, Any]) -> str:
        from lily_kernel.typed import actions
        problem = check_args(PROPOSE_ACTION["function"]["parameters"], args)
        if problem:
            raise ToolError(f"propose_action: {problem}")
        skill = self._typed_skill()
        refusal = pending.waiting_refusal(self.session, self.proposal)
        if refusal:  # a new proposal never replaces one that waits
            raise ToolError(refusal)
        try:
            action = actions.prepare(self.session, skill, args["parameters"])
        except ActionError as exc:
            raise ToolError(str(exc)) from None
        self.session.offer(action)
        self.proposal = action
        return (f"Proposed {skill.name} with {json.dumps(action.params)}. The user now sees a "
                "confirmation card (Confirm / Cancel, or /confirm and /cancel); nothing has "
                "happened yet. Tell the user briefly what will happen once they confirm.")

    def read_config(self, args: dict[str, Any]) -> str:
        problem = check_args(READ_CONFIG["function"]["parameters"], args)
        if problem:
            raise ToolError(f"read_config: {problem}")
        from lily_kernel.typed.actions import spec_of  # typed skills load on first use
        skill = self._typed_skill()
        spec = spec_of(skill)
        scoped = self.session.config.scoped(skill.name, spec.acl_read, spec.acl_write)
        try:
            return json.dumps(scoped.read(args["path"]))
        except (PermissionError, ValueError) as exc:
            raise ToolError(str(exc)) from None

    def read_skill_file(self, args: dict[str, Any]) -> str:
        problem = check_args(READ_SKILL_FILE["function"]["parameters"], args)
        if problem:
            raise ToolError(f"read_skill_file: {problem}")
        if self.skill is None:
            raise ToolError("load a skill with load_skill before reading its files")
        skill = self.session.snapshot.get(self.skill)
        if skill is None:
            raise ToolError(f"the loaded skill '{self.skill}' is no longer loaded")
        parts = split(args["path"])  # the file boundary, rooted at the skill's references/
        if parts[:1] == ("references",):
            parts = parts[1:]
        refs = WorkspaceFS(Path(skill.path) / "references", name="references",
                           read_bytes=self.session.limits.read_bytes)
        return refs.read("/".join(parts))

    def call_tool(self, name: str, args: dict[str, Any]) -> str:
        session = self.session
        refusal = session.policy.model_refusal(session.tools, name)
        if refusal:
            raise ToolError(refusal)
        tool = session.tools.get(name)
        if tool is None:  # model_refusal names an unknown tool first
            raise ToolError(f"{name}: no such tool")
        problem = check_args(tool.parameters, args)
        if problem:
            raise ToolError(f"{name}: {problem}")
        self.tools_used.append(name)
        log.debug("tool call %s (%s)", name, tool.origin)
        out = invoke(tool, args)  # a tool's own failure is information for the model
        if out.display is not None:
            self.shown.append(out.display)
        return out.text


def offered_tools(session: Session) -> list[dict[str, Any]]:
    """The tool schemas a request of ``session`` offers the model now (for ``/model``)."""
    return _Request(session, None).tool_specs()


def run(session: Session, text: str, skill: SkillRequest | None = None,
        on_text: Callable[[str], None] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None) -> Reply:
    """Run one request; return the final answer, or raise :class:`AgentError`."""
    pending.decline_waiting(session)  # a new request first: a call still waiting is declined
    session.withdraw()  # a card offered by a request that failed was never shown
    env = session.environ
    problem = session.config_error or client.not_configured(env, session.model_config)
    if problem:
        if session.untrusted_note:  # a withheld endpoint explains the missing model
            problem = f"{problem} {session.untrusted_note}"
        raise AgentError(problem)
    request = _Request(session, skill.skill.name if skill else None)
    user = {"role": "user", "content": skill.prompt if skill else text}
    if request.skill and on_event:
        on_event("skill", {"name": request.skill, "forced": True})
    return _drive(request, [user], 1, None, on_text, on_event)


def resume(session: Session, call: HeldCall, result: str,
           on_text: Callable[[str], None] | None = None,
           on_event: Callable[[str, dict[str, Any]], None] | None = None) -> Reply:
    """Continue a paused request with the confirmed tool call's ``result``."""
    paused = call.paused
    messages = paused.answered(result)
    problem = session.config_error or client.not_configured(session.environ, session.model_config)
    if problem:
        _commit(session, messages)
        raise AgentError(problem)
    request = _Request(session, paused.skill)
    request.tools_used = [*paused.tools_used, call.tool]
    return _drive(request, messages, min(paused.steps + 1, MAX_STEPS), paused.usage,
                  on_text, on_event)


decline = pending.decline  # Cancel's answer to the model: "declined by the user"


def _commit(session: Session, messages: list[dict[str, Any]]) -> None:
    pending.commit(session, messages)


def _withdraw(request: _Request, messages: list[dict[str, Any]]) -> None:
    """The request ends in an error: what it offered is never shown, so nothing waits, and
    the model's record of its proposal says so (docs/typed-skills.md#confirmation)."""
    request.session.withdraw()
    for i, message in enumerate(messages):
        if request.proposal_call and message.get("tool_call_id") == request.proposal_call:
            messages[i] = {**message, "content": WITHDRAWN}


def _add_usage(total: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return total
    total = dict(total or {"prompt_tokens": 0, "completion_tokens": 0})
    for key in ("prompt_tokens", "completion_tokens"):
        total[key] += usage.get(key, 0)
    return total


def _drive(request: _Request, messages: list[dict[str, Any]], first_step: int, usage: dict[str, Any] | None,
           on_text: Callable[[str], None] | None,
           on_event: Callable[[str, dict[str, Any]], None] | None) -> Reply:
    """Model steps from ``first_step`` until an answer, a pause or the budget's end."""
    session = request.session
    if session.mcp is not None:  # the MCP servers' current tools (docs/mcp.md#tools)
        session.mcp.sync(session.tools, budget=session.model_config.timeout)
    config = session.model_config
    openai_client = session.model_clients.get(config, session.environ)
    system = system_message(session)
    tools = request.tool_specs()
    emit = on_event or (lambda kind, data: None)

    def commit(messages: list[dict[str, Any]]) -> None:
        _commit(session, messages)

    turn_start, left_out = len(messages), (0, 0)
    limits = session.limits
    chars = session.budget.chars  # cached per message: no re-serialising of the history
    size = session.budget.history_chars(session.conversation) + sum(map(chars, messages))
    try:
        for step in range(first_step, MAX_STEPS + 1):
            turn_start = len(messages)
            emit("waiting", {"model": config.model, "step": step})  # a face may show a timer
            turn, fitted = session.budget.send(  # fits the context window: agent/budget.py
                openai_client, session.model_config, system, tools, session.conversation, messages,
                on_text, session.limits.answer_chars)
            left_out = max(left_out, (fitted.turns_dropped, fitted.results_shortened))
            usage = _add_usage(usage, turn.usage)
            session.add_usage(turn.usage, config.model)
            messages.append(turn.message())
            if not turn.tool_calls:
                if turn.finish_reason == "length":
                    turn.content += ("\n\n*(The model stopped at its length limit; the answer "
                                     "may be cut short.)*")
                    messages[-1] = turn.message()
                commit(messages)
                shown = turn.content
                if request.cut_results:  # the user is told; the model saw the marker
                    n = request.cut_results
                    shown += (f"\n\n*({n} tool result{'s were' if n != 1 else ' was'} cut at "
                              f"{session.limits.tool_result_chars:,} characters: lily.toml "
                              "[limits] tool_result_chars.)*")
                if session.untrusted_note and not session.trust_note_shown:
                    # Once per session: the workspace's endpoint or outbox was not used.
                    session.trust_note_shown = True
                    shown += f"\n\n*({html.escape(session.untrusted_note)})*"  # sanitize
                return Reply(shown, request.skill, request.tools_used, step,
                             request.proposal, usage, request.shown, left_out)
            held = None
            size += chars(messages[-1])
            result: str | None
            for n, call in enumerate(turn.tool_calls):
                before = request.skill
                if n >= limits.tool_calls_per_step or size > limits.conversation_chars:
                    # Answered, not run: every call needs a result, none runs past a cap.
                    result = too_many(limits)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    emit("tool", {"name": call.name, "ok": False})
                    continue
                args = call.parsed()
                try:
                    confirm_first = held is None and request.needs_confirmation(call.name, args)
                except ToolError as exc:
                    confirm_first, result = False, f"Error: {exc}"
                else:
                    result = None
                if confirm_first:
                    held = (call, args, len(messages))
                    emit("tool", {"name": call.name, "ok": True, "waiting": True})
                    continue
                if result is None:
                    result = NOT_RUN if held is not None else request.execute(call.name, args)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                if request.proposal is not None and request.proposal_call is None:
                    request.proposal_call = call.id
                size += len(result)
                if request.skill != before:
                    emit("skill", {"name": request.skill, "forced": False})
                emit("tool", {"name": call.name, "ok": not result.startswith("Error:")})
            if held is not None:
                call, args, at = held
                paused = Paused(messages, call.id, request.skill, list(request.tools_used),
                                step, usage, at)
                tool = session.tools.get(call.name)
                assert tool is not None  # needs_confirmation found it
                item = pending.hold(tool, args, paused)
                session.offer(item)
                return Reply(turn.content, request.skill, request.tools_used, step, item, usage,
                             request.shown, left_out)
        _withdraw(request, messages)  # the request ends in an error: its card is never shown
        commit(messages)
        raise AgentError(f"stopped after {MAX_STEPS} model steps without a final answer; "
                         "the tool results so far are kept in the conversation")
    except ModelError as exc:
        _withdraw(request, messages)  # the request ends in an error: its card is never shown
        del messages[turn_start:]  # a faulty turn (e.g. invalid tool-call JSON) is not kept
        if len(messages) > 1:  # tools ran before it: keep what happened, consistently
            commit(messages)
        raise AgentError(redaction.redact(str(exc), session.environ)) from None
    except KeyboardInterrupt:
        _withdraw(request, messages)
        if len(messages) > 1:
            commit(messages)
        raise
