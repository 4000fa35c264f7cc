"""The agent loop: one request, at most one skill, tools under policy (docs/agent.md#the-loop).

``run`` sends persona + skills index + rules + the conversation + the request
to the model, executes the tool calls it makes through the request's
:class:`~lily_kernel.agent.request.Request` (the tools it offers and how each
call runs: ``agent/request.py``), and repeats until the model answers without
tool calls or the step budget is spent. Refusals are tool errors the model can
read; only endpoint faults end the request. The conversation is committed only
in a consistent state: every assistant tool call has its result.

A call the gate (tools/gate.py, docs/permissions.md#the-gate) says asks pauses the
request: it ends with a card, and the call is answered when the user decides
(``agent/pending.decide``, where the gate decides it again) — :func:`resume` goes on
with the tool's result after Confirm; Cancel, or a new request first, answers it
"declined by the user". See docs/notebook-tools.md#confirmation.
"""
from __future__ import annotations

import html
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lily_kernel import redaction
from lily_kernel.agent import endpoint_info, hygiene, model_client, pending, small_steps, text_calls
from lily_kernel.agent.budget import profile_of
from lily_kernel.agent.model_client import ToolCall, Turn
from lily_kernel.agent.pending import DECLINED, HeldCall, Paused, PendingItem
from lily_kernel.agent.request import Request, system_message
from lily_kernel.agent.small_steps import failed_tools, request_of, required_call, restated
from lily_kernel.errors import AgentError, ModelError, ToolError
from lily_kernel.settings.limits import Limits
from lily_kernel.tools import data_preview, gate, images

if TYPE_CHECKING:
    from lily_kernel.commands.results import SkillRequest
    from lily_kernel.session.session import (
        Session,  # type hints only: agent sits below session and commands
    )


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
    notes: list[str] = field(default_factory=list)  # footer lines: docs/agent.md#loop-hygiene


def run(session: Session, text: str, skill: SkillRequest | None = None,
        on_text: Callable[[str], None] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        shown: list[str] | None = None) -> Reply:
    """Run one request; return the final answer, or raise :class:`AgentError`.
    ``shown``: the hashes of the images its ``@`` mentions attached, sent as image parts
    of the request to a model with vision (tools/images.py)."""
    pending.decline_waiting(session)  # a new request first: a call still waiting is declined
    images.take()  # images offered by a call no step answered are not this request's
    session.withdraw()  # a card offered by a request that failed was never shown
    env = session.environ
    problem = session.config_error or model_client.not_configured(env, session.model_config)
    if problem:  # a withheld endpoint explains a missing model
        raise AgentError(endpoint_info.explained(session, problem))
    endpoint_info.prepare(session)  # the endpoint's one model when none is named; its window
    session.budget.lacks_tools = lambda: endpoint_info.template_lacks_tools(session)
    content = skill.prompt if skill else text
    request = Request(session, skill.skill.name if skill else None,
                      request_of([{"role": "user", "content": content}]))
    if request.computes and profile_of(session.model_config) == "small":
        content += data_preview.previews(session, content, request.data_files)
    user = {"role": "user", "content": images.with_images(
        content, (shown or []) if session.model_config.sees_images() else [])}
    if request.skill and on_event:
        on_event("skill", {"name": request.skill, "forced": True})
    return _drive(request, [user], 1, None, on_text, on_event)


def resume(session: Session, call: HeldCall, result: str,
           on_text: Callable[[str], None] | None = None,
           on_event: Callable[[str, dict[str, Any]], None] | None = None) -> Reply:
    """Go on with a confirmed call's ``result``, masked whatever route decided it."""
    paused = call.paused
    messages = _seen(session, paused.answered(redaction.redact(result, session.environ)))
    problem = session.config_error or model_client.not_configured(session.environ, session.model_config)
    if problem:
        pending.commit(session, messages)
        raise AgentError(problem)
    request = Request(session, paused.skill, request_of(messages))
    request.tools_used = [*paused.tools_used, call.tool]
    request.recall(messages)  # identical calls stay repeats, spent attempts stay spent
    return _drive(request, messages, min(paused.steps + 1, MAX_STEPS), paused.usage,
                  on_text, on_event)


decline = pending.decline  # Cancel's answer to the model: "declined by the user"


def _withdraw(request: Request, messages: list[dict[str, Any]]) -> None:
    """The request ends in an error: what it offered is never shown, so nothing waits, and
    the model's record of its proposal says so (docs/typed-skills.md#confirmation)."""
    request.session.withdraw()
    for i, message in enumerate(messages):
        if request.proposal_call and message.get("tool_call_id") == request.proposal_call:
            messages[i] = {**message, "content": WITHDRAWN}


def _seen(session: Session, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """After a step's tool results, the image outputs they showed, as one user message of
    image parts for a model with vision (tools/images.py); taken either way, so none
    waits for a later step."""
    hashes = images.take()
    if hashes and session.model_config.sees_images():
        messages.append(images.message(hashes))
    return messages


def _add_usage(total: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return total
    total = dict(total or {"prompt_tokens": 0, "completion_tokens": 0})
    for key in ("prompt_tokens", "completion_tokens"):
        total[key] += usage.get(key, 0)
    return total


def _drive(request: Request, messages: list[dict[str, Any]], first_step: int, usage: dict[str, Any] | None,
           on_text: Callable[[str], None] | None,
           on_event: Callable[[str, dict[str, Any]], None] | None) -> Reply:
    """Model steps from ``first_step`` until an answer, a pause or the budget's end."""
    session = request.session
    if session.mcp is not None:  # the MCP servers' current tools (docs/mcp.md#tools)
        session.mcp.sync(session.tools, budget=session.model_config.timeout)
    config = session.model_config
    openai_client = session.model_clients.get(config, session.environ)
    system = system_message(session)
    emit = on_event or (lambda kind, data: None)
    skills = {s.name for s in session.snapshot.skills if s.model_invocable}
    notes = _Notes()
    request.note = notes.add  # e.g. ran in the sandbox (agent/request.py)
    small = profile_of(config) == "small"
    last = small_steps.last_step(messages)  # resumed after a card: the confirmed run's step
    failed = failed_tools(last)  # the last step's tools, when all its calls failed
    named = small_steps.named_calls(last)  # and the calls its errors named
    asked_again = nudged = False  # the one extra request after an empty final answer,
    # and the one after an answer that showed a call (docs/agent.md#loop-hygiene)
    asking: dict[str, Any] | None = None  # that one-off message, for the next step only
    called_again = False  # the one extra request after a required call that ran on
    fixed = False  # and the one after an answer that repeated a raised run's error
    again_format: dict[str, Any] | None = None  # and the format it keeps

    turn_start, left_out = len(messages), (0, 0)
    limits = session.limits
    chars = session.budget.chars  # cached per message: no re-serialising of the history
    size = session.budget.history_chars(session.conversation) + sum(map(chars, messages))
    try:
        for step in range(first_step, MAX_STEPS + 1):
            turn_start = len(messages)
            emit("waiting", {"model": config.model, "step": step})  # a face may show a timer
            tools = request.tool_specs()  # a skill loaded in the last step changes them
            offered = [t["function"]["name"] for t in tools]
            aliases = request.aliases(offered)  # list_files for list (docs/agent.md#loop-hygiene)
            required = again_format or required_call(step, small, tools, failed,
                                                     request.leads, named)
            again_format = None
            guard = hygiene.AnswerGuard(on_text, offered)
            turn, fitted = session.budget.send(  # fits the context window: agent/budget.py
                openai_client, hygiene.sampled(session.model_config) if asking is
                hygiene.CALL_AGAIN or asking is hygiene.FIX_AGAIN else session.model_config, system, tools,
                session.conversation,
                [*messages, asking] if asking else restated(messages, small),
                guard.feed, session.limits.answer_chars, required)
            if asking is hygiene.ASK_AGAIN and hygiene.echoes_ask(turn.content):
                turn.content = ""  # the model repeated the question: no answer still
            asking = None
            left_out = max(left_out, (fitted.turns_dropped, fitted.results_shortened))
            usage = _add_usage(usage, turn.usage)
            for line in () if request.tools_used else turn.notes:  # tools dropped (unless
                notes.add(line)  # one was called: agent/tools_dropped.py)
            session.add_usage(turn.usage, config.model)
            if required is not None and not called_again and step < MAX_STEPS and \
                    turn.finish_reason in ("stopped", "cut", "length") and \
                    small_steps.cut_answer(turn.content) is None:  # an answer keeps its text
                # a required call that ran on is broken: asked once more, the same format
                called_again, asking, again_format = True, hygiene.CALL_AGAIN, required
                notes.add("the model's call repeated itself; asked again")
                continue
            if turn.finish_reason == "stopped":  # the guard stopped a runaway answer
                turn.content = guard.text
                notes.add(f"answer stopped: {guard.stopped}")
            elif not turn.tool_calls and turn.finish_reason != "cut":
                # the request's own skill named as a tool is read too: Request answers it
                own = [request.skill] if request.skill else []
                # a call the step required as JSON (and the endpoint took the format) is
                # the answer asked for, not a call written as text: no footer line for it
                asked_json = required is not None and "response_format" not in \
                    model_client.refused(model_client.endpoint_key(session.model_config))
                _read_text_calls(turn, [*offered, *own, *aliases], skills, notes,
                                 counted=not asked_json)
            _aliased(turn, aliases, notes)
            if small and small_steps.take_answer(turn):  # the answer tool: its text is the answer
                guard.instead(turn.content)
            if not turn.tool_calls or turn.content:
                guard.release()  # not a call written as text: the face shows it now
            broken = _arguments(request, turn, notes)
            messages.append(turn.message())
            if not turn.tool_calls and not turn.content.strip() and not asked_again and \
                    step < MAX_STEPS and any(m.get("role") == "tool" for m in messages):
                asked_again, asking = True, hygiene.ASK_AGAIN  # empty after tool steps
                messages.pop()
                continue
            showed = None if turn.tool_calls or nudged or step == MAX_STEPS or \
                turn.finish_reason in ("cut", "stopped") else \
                text_calls.shown_call(turn.content, [*offered, *aliases], skills)
            if showed is not None:  # a call shown inside prose: asked once to make it
                nudged, asking = True, hygiene.make_the_call(showed.name, showed.arguments)
                notes.add("asked the model to make the call it showed")
                messages.pop()
                continue
            retry = None if turn.tool_calls or fixed or not small or step == MAX_STEPS else \
                small_steps.echoed_error(turn.content, messages[:-1], tools)
            if retry is not None:  # the error repeated as the answer: one required retry
                fixed, asking, again_format = True, hygiene.FIX_AGAIN, retry
                notes.add("the answer repeated the error; asked for the fix")
                messages.pop()
                continue
            if not turn.tool_calls:
                if not turn.content.strip() and turn.finish_reason != "cut":
                    turn.content = _no_answer(messages, notes)
                elif turn.finish_reason == "length":
                    turn.content += ("\n\n*(The model stopped at its length limit; the answer "
                                     "may be cut short.)*")
                    messages[-1] = turn.message()
                pending.commit(session, messages)
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
                             request.proposal, usage, request.shown, left_out, notes.lines)
            held = None
            size += chars(messages[-1])
            result: str | None
            for n, call in enumerate(turn.tool_calls):
                before = request.skill
                if n >= limits.tool_calls_per_step or size > limits.conversation_chars:
                    # Answered, not run: every call needs a result, none runs past a cap.
                    result = too_many(limits)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    emit("tool", {"name": call.name, "ok": False, "id": call.id, "result": result})
                    continue
                if call.id in broken:  # arguments not JSON even after the repairs
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": broken[call.id]})
                    size += len(broken[call.id])
                    emit("tool", {"name": call.name, "ok": False, "id": call.id,
                                  "result": broken[call.id]})
                    continue
                args = call.parsed()
                again = request.repeated(call.name, args) if held is None else None
                if again is not None and small and call.name == small_steps.RETRIED and \
                        not request.attempts_left() and \
                        (only := small_steps.answer_only(tools)) is not None:
                    # run_python refused with no attempt left: the next step is the answer
                    again_format = only
                    notes.add("no attempt left for code; the answer was asked for")
                if again is not None:  # the same call answered before: not run again
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": again})
                    size += len(again)
                    emit("tool", {"name": call.name, "ok": True, "id": call.id, "result": again})
                    continue
                try:
                    confirm_first = held is None and request.needs_confirmation(call.name, args)
                except ToolError as exc:
                    confirm_first, result = False, f"Error: {exc}"
                else:
                    result = None
                if confirm_first:
                    held = (call, args, len(messages))
                    emit("tool", {"name": call.name, "ok": True, "waiting": True, "id": call.id,
                                  "args": args})
                    continue
                if result is None and held is None:
                    # a face may show the call before it runs (the ACP face's tool_call)
                    emit("tool_start", {"name": call.name, "id": call.id, "args": args})
                    result = request.execute(call.name, args)
                    request.remember(call.name, args, result)
                elif result is None:
                    result = NOT_RUN
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                if request.proposal is not None and request.proposal_call is None:
                    request.proposal_call = call.id
                size += len(result)
                if request.skill != before:
                    emit("skill", {"name": request.skill, "forced": False})
                emit("tool", {"name": call.name, "ok": not result.startswith("Error:"),
                              "id": call.id, "args": args, "result": result})
            failed = failed_tools(messages[turn_start:])
            named = small_steps.named_calls(messages[turn_start:])
            if failed and small:  # the next required step may go to any tool that can answer
                request.asked |= {"run_python"}
            if held is None:
                _seen(session, messages)
            if held is not None:
                call, args, at = held
                paused = Paused(messages, call.id, request.skill, list(request.tools_used),
                                step, usage, at)
                tool = session.tools.get(call.name)
                assert tool is not None  # needs_confirmation found it
                item = pending.hold(session, tool, args, paused, request.held or gate.Asks(''))
                session.offer(item)
                return Reply(turn.content, request.skill, request.tools_used, step, item, usage,
                             request.shown, left_out, notes.lines)
        _withdraw(request, messages)  # the request ends in an error: its card is never shown
        pending.commit(session, messages)
        raise AgentError(f"stopped after {MAX_STEPS} model steps without a final answer; "
                         "the tool results so far are kept in the conversation")
    except ModelError as exc:
        _withdraw(request, messages)  # the request ends in an error: its card is never shown
        del messages[turn_start:]  # a faulty turn (e.g. invalid tool-call JSON) is not kept
        if len(messages) > 1:  # tools ran before it: keep what happened, consistently
            pending.commit(session, messages)
        raise AgentError(redaction.redact(str(exc), session.environ)) from None
    except KeyboardInterrupt:
        _withdraw(request, messages)
        if len(messages) > 1:
            pending.commit(session, messages)
        raise


class _Notes:
    """The footer lines of one request, each once; a line with ``{n}`` counts."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, line: str, n: int = 0) -> None:
        self.counts[line] = self.counts.get(line, 0) + n

    @property
    def lines(self) -> list[str]:
        return [line.format(n=n, s="" if n == 1 else "s") if n else line
                for line, n in self.counts.items()]


def _read_text_calls(turn: Turn, offered: list[str], skills: set[str],
                     notes: _Notes, counted: bool = True) -> None:
    """An answer that is tool calls written as text becomes those calls (agent/text_calls.py)."""
    found = text_calls.read(turn.content, offered, skills)
    if found:
        # ids unique in the conversation, and 9 letters or digits (Mistral's templates
        # refuse any other id)
        turn.tool_calls = [ToolCall(uuid.uuid4().hex[:9], c.name, c.arguments) for c in found]
        turn.content = ""
        if counted:
            notes.add("{n} tool call{s} read from text", len(found))


def _aliased(turn: Turn, aliases: dict[str, str], notes: _Notes) -> None:
    """A call by an offered tool's function name (``list_files``) is a call of the tool;
    the conversation keeps the tool's name."""
    for call in turn.tool_calls:
        if call.name in aliases:
            notes.add(f"tool name {call.name} taken as {aliases[call.name]}")
            call.name = aliases[call.name]


def _arguments(request: Request, turn: Turn, notes: _Notes) -> dict[str, str]:
    """Each call's arguments as a JSON object: repaired once when they are not
    (agent/text_calls.py), else answered with an error naming the tool's signature (by
    call id); the assistant message then carries the repaired (or empty) arguments."""
    broken: dict[str, str] = {}
    for call in turn.tool_calls:
        try:
            call.parsed()
            continue
        except ModelError as exc:
            problem = str(exc)
        fixed = text_calls.repair_arguments(call.arguments)
        if fixed is not None:
            call.arguments = json.dumps(fixed, ensure_ascii=False)
            notes.add("arguments of {n} tool call{s} repaired", 1)
            continue
        call.arguments = "{}"
        schema = request.schema_of(call.name)
        how = f"; {hygiene.usage(call.name, schema)}" if schema is not None else ""
        broken[call.id] = (f"Error: not run: {problem.removeprefix('the model sent ')}; send "
                           f"the arguments as one JSON object{how}")
    return broken


def _no_answer(messages: list[dict[str, Any]], notes: _Notes) -> str:
    """The text shown for an answer still empty: the last tool result, with a note."""
    last = hygiene.last_result(messages)
    if last is None:
        notes.add("the model's answer was empty")
        return "*(The model's answer was empty.)*"
    notes.add("no final answer: the last tool result is shown")
    return hygiene.shown_result(*last)
