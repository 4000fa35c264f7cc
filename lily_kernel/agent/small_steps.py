"""The small-model profile's two step rules (docs/agent.md#small-model-profile).

Measured on Qwen2.5-Coder-1.5B (bench/README.md, issue 30): a small model asked a plain
question explains how the user could find out instead of calling a tool, and after a tool
result it often answers the question as if the result were not there ("you can use
inspect_variable…"). Two deterministic rules, for the small profile only:

- :func:`required_call`: the first model step of a request that offers tools is sent with a
  ``response_format`` admitting only one call to an offered tool (tools/offering.call_format).
  llama.cpp, vLLM and Ollama turn it into a grammar, so the answer is that call, as JSON,
  which the loop reads as a call written as text (agent/text_calls.py). An endpoint that
  refuses the parameter (HTTP 400 naming it) is asked again without it, and from then on.
  When every call of that first step failed (an ``Error:`` result: ``inspect_variable`` on
  ``notes.txt``), the second step requires a call too, to another tool. Later steps are
  free: the model answers, or calls the next tool.
- :func:`restated`: a step that follows tool results is sent with the user's request restated
  after the last result ("(The user asked: … Answer now from this result.)"); only in what
  is sent, never in the conversation kept. Without it the 1.5B model answered "What columns
  does df have?" after inspect_variable's result with "you can use inspect_variable"; with
  it, "The columns of df are x, y and label" (and, after read, it still called write).
  The whole request is restated up to :data:`REQUEST_CHARS`; past that its start and its
  end (where a request states the form of its answer: a rounding, a unit, ``@name[value]``).
- :func:`take_answer`: the ``answer`` tool (offered in the small profile, so the required
  step admits an answer too): a step that only calls it ends the request with its text.
  A greeting or an arithmetic question needs no tool, and is answered in one step. Its
  arguments written alone as a free step's answer (``{"text": "…"}``) are that answer.
- :func:`raised_runs`: how often ``run_python``'s code raised in this request; the model may
  call it again with changed code, :data:`RUN_ATTEMPTS` times in all. An answer that only
  repeats the error (:func:`echoed_error`) is asked for once more, as a required retry. The
  same code sent again after it raised spends an attempt (:func:`repeats_of_raised`); with
  none left, a refused call is followed by a step that admits only the answer
  (:func:`answer_only`).
"""
from __future__ import annotations

import json
import re
from typing import Any

from lily_kernel.agent import hygiene
from lily_kernel.agent.model_client import Turn
from lily_kernel.tools import data_preview, offering
from lily_kernel.tools.notebook_tools import RAISED

REQUEST_CHARS = 1_200  # of the user's request, when restated after a tool result
ANSWER = "answer"  # the small profile's answer tool (agent/request.py)
RUN_ATTEMPTS = 3  # run_python calls whose code raised, per request
RETRIED = "run_python"  # a failed run stays admitted at the next required step: a retry
NO_ATTEMPT = "Error: not run: the code raised"  # run_python with no attempt left (retry_refused)
#: The answer tool (offered in the small profile, last, or first when the request asks for no
#: tool: tools/offering.asked_first).
ANSWER_TOOL = offering.spec(ANSWER, "Your final answer, in the form the request asks for.",
                            {"type": "object", "properties": {"text": {"type": "string"}},
                             "required": ["text"]})
NOT_ALONE = "answer: not run: call it alone, once the other calls' results are in"
_CUT_ANSWER = re.compile(r'\s*\{\s*"name"\s*:\s*"answer"\s*,\s*"arguments"\s*:\s*\{\s*"text"\s*:\s*"')
_BARE_ARGUMENTS = re.compile(r"\A\s*(?:```(?:json)?[ \t]*\n)?\s*(\{.*\})\s*(?:```)?\s*\Z", re.S)
_CALL_NAMED = re.compile(r"\b([A-Za-z_]\w*)\(\w+=")  # read(path="…") in an error's text
_FORCED = "Use the skill '"  # commands.results.SkillRequest.prompt's first line
_ARGUMENTS = "\n\nARGUMENTS: "  # and the user's input after the body (skills.substitution)


def required_call(step: int, small: bool, tools: list[dict[str, Any]],
                  failed: set[str] | frozenset[str] = frozenset(),
                  leads: frozenset[str] = frozenset(),
                  named: set[str] | frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The ``response_format`` of this step, or None: in the small profile, a required call
    on the first step when tools are offered (the ``answer`` tool among them), and on the
    second when every call of the first failed (``failed``: their tools), to a tool other
    than those — ``run_python`` stays, to be called again with changed code — and not to
    ``answer``: right after a failure an answer is a guess. ``leads``: the tools the
    required steps admit when some of them are left (agent/request.py): ``run_python``
    when the request names a data file the workspace holds (tools/offering.data_files) —
    its answer comes from computing on the data: before any code ran an answer is a guess,
    and the look-up tools show a file's text or a variable's summary, they compute nothing;
    the tools for a file's text it asks for (``offering.FILE_TOOLS``) and ``load_skill``
    when it names another file the workspace holds (tools/offering.other_files) — it is
    about that file's text, which no notebook tool sees. ``named``: the tools the failed calls'
    errors name as the call that works (:func:`named_calls`: ``read(path="app.py")`` for
    ``inspect_variable("app.py")``); when some are left, the second step admits only those —
    the error said the way on, and the 1.5B model, free among the rest, took ``last_error``."""
    if not small or not tools or step > 2 or (step == 2 and not failed):
        return None
    left = [t for t in tools if t["function"]["name"] not in (failed - {RETRIED}) | {ANSWER}] \
        if step == 2 else tools
    if step == 2 and named:
        left = [t for t in left if t["function"]["name"] in named] or left
    first = [t for t in left if t["function"]["name"] in leads]
    return offering.call_format(first or left) if left else None


def _failed(message: dict[str, Any], name: str) -> bool:
    content = str(message.get("content") or "")
    return content.startswith("Error:") or (name == RETRIED and RAISED.match(content) is not None)


def failed_tools(step_messages: list[dict[str, Any]]) -> set[str]:
    """The tools a step called when every one of its calls failed (an ``Error:`` result, or
    ``run_python`` code that raised); else empty. ``step_messages``: the step's assistant
    message and its results."""
    if not step_messages or not step_messages[0].get("tool_calls"):
        return set()
    calls = {c.get("id"): c["function"]["name"] for c in step_messages[0]["tool_calls"]}
    results = [m for m in step_messages[1:] if m.get("role") == "tool"]
    if not results or not all(_failed(m, calls.get(m.get("tool_call_id"), "")) for m in results):
        return set()
    return set(calls.values())


def named_calls(step_messages: list[dict[str, Any]]) -> set[str]:
    """The tools named as a call (``read(path="app.py")``) in the results of a step whose
    calls all failed (:func:`failed_tools`), else empty."""
    if not failed_tools(step_messages):
        return set()
    return {found.group(1) for m in step_messages[1:] if m.get("role") == "tool"
            for found in _CALL_NAMED.finditer(str(m.get("content") or ""))}


def last_step(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last step in ``messages``: its assistant message and what follows, else empty."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return messages[last:] if last >= 0 else []


def raised_by(name: str, result: str) -> int:
    """1 when ``result`` is run_python's, saying its code raised; else 0."""
    return int(name == RETRIED and RAISED.match(result) is not None)


def retry_refused(name: str, raised: int) -> str | None:
    """The answer to a run_python call once :data:`RUN_ATTEMPTS` attempts in the request
    raised (code that raised, or the same code sent again after it raised), or None: it
    may run."""
    if name != RETRIED or raised < RUN_ATTEMPTS:
        return None
    return (f"{NO_ATTEMPT} {raised} times in this request (the same code "
            "sent again counts); answer the user from the results so far, and say what failed")


def _refused(result: str) -> bool:
    """Is ``result`` a call's refusal (a repeat, or run_python with no attempt left), not
    what it returned?"""
    return result.startswith((hygiene.ALREADY, NO_ATTEMPT))


def repeats_of_raised(messages: list[dict[str, Any]]) -> int:
    """How many ``run_python`` calls in ``messages`` were refused as the same code as one
    whose run raised: each spent an attempt (a request resumed after a card counts them
    again)."""
    ran: dict[str, str] = {}
    repeats = 0
    for name, args, result in _calls(messages):
        key = hygiene.call_key(name, args)
        if not _refused(result):
            ran[key] = result
        elif key in ran and raised_by(name, ran[key]):
            repeats += 1
    return repeats


def answer_only(tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``response_format`` admitting only the ``answer`` tool, when ``tools`` offer it;
    else None. For the step after a ``run_python`` call refused with no attempt left: the
    only step that can still help the user is the answer (free, the 0.5B model sent the
    same code at each of its 5 or 6 steps left; DABench slice, bench/README.md)."""
    answer = [t for t in tools if t["function"]["name"] == ANSWER]
    return offering.call_format(answer) if answer else None


def calls_made(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, result) of every call ``messages`` answered, in order (not those
    refused: "Already answered", no attempt left): a request resumed after a card
    remembers them, so identical code is still a repeat and raised runs still count."""
    return [made for made in _calls(messages) if not _refused(made[2])]


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, result) of every well-formed call in ``messages`` that has a
    result, in order; read back from a journal, a malformed call is skipped."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    made = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            result = results.get(call.get("id"))
            try:
                name, args = call["function"]["name"], json.loads(call["function"]["arguments"] or "{}")
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(result, str) and isinstance(args, dict) and isinstance(name, str):
                made.append((name, args, result))
    return made


def _raised(messages: list[dict[str, Any]]) -> list[str]:
    """The ``run_python`` results in ``messages`` that say its code raised, in order."""
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"
            and RAISED.match(str(m.get("content") or "")) is not None]


def raised_runs(messages: list[dict[str, Any]]) -> int:
    """How many ``run_python`` results in ``messages`` say its code raised."""
    return len(_raised(messages))


def echoed_error(content: str, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``response_format`` of a retry when ``content``, a free step's answer, repeats
    the error of the run_python code that raised last in ``messages`` (its first line),
    and another attempt is left; else None. An error repeated is no answer: the model left its fix
    unwritten (the 1.5B model answered DABench 207 and 210 with the result it was given,
    which said to fix the line that raised)."""
    raised = _raised(messages)
    code = [t for t in tools if t["function"]["name"] == RETRIED]
    if not raised or not code or len(raised) + repeats_of_raised(messages) >= RUN_ATTEMPTS:
        return None
    first = raised[-1].split("\n", 1)[0].strip()  # the last error, though a repeat of its
    # code may have been refused since ("Already answered: … would raise the same way")
    return offering.call_format(code) if len(first) >= 20 and \
        content.strip().startswith(first) else None


def take_answer(turn: Turn) -> bool:
    """A step that only calls ``answer`` (or whose ``answer`` call was cut at the length
    limit) becomes that answer: its text is the turn's content, with no call left. True
    when it did."""
    calls = turn.tool_calls
    if calls and all(c.name == ANSWER for c in calls):
        texts = [_text_of(c.arguments) for c in calls]
        turn.content, turn.tool_calls = "\n\n".join(t for t in texts if t), []
        return True
    cut = None if calls else cut_answer(turn.content)
    if cut is None and not calls:
        cut = bare_answer(turn.content)
    if cut is not None:
        turn.content = cut
        return True
    return False


def _text_of(arguments: str) -> str:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return cut_answer('{"name": "answer", "arguments": ' + arguments) or ""
    text = value.get("text") if isinstance(value, dict) else None
    return text if isinstance(text, str) else ""


def bare_answer(content: str) -> str | None:
    """The text of the ``answer`` tool's arguments written alone as the answer, without the
    call around them (``{"text": "…"}``, maybe in a fence), or None. The 1.5B model, shown
    the answer tool, answered a free step so; its user would read JSON (look-up task
    list_files). Only an object whose one key is ``text``, a string, and nothing else."""
    found = _BARE_ARGUMENTS.match(content)
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != {"text"} or not isinstance(value["text"], str):
        return None
    text: str = value["text"]
    return text


def cut_answer(content: str) -> str | None:
    """The text of an ``answer`` call written as JSON but not closed (cut at the length
    limit), or None when ``content`` is no such call."""
    found = _CUT_ANSWER.match(content)
    if found is None:
        return None
    rest, i = content[found.end():], 0
    while i < len(rest) and rest[i] != '"':
        i += 2 if rest[i] == "\\" else 1
    raw = rest[:i].removesuffix("\\")
    try:
        text = json.loads(f'"{raw}"')
    except ValueError:
        return raw
    return text if isinstance(text, str) else raw


def request_of(messages: list[dict[str, Any]]) -> str:
    """The user's request as restated: the request's first message (under a forced skill,
    whose body follows, its first line and the user's input), on one line, at most
    :data:`REQUEST_CHARS`."""
    first = messages[0].get("content") if messages else None
    if isinstance(first, list):  # text and image parts (tools/images.py)
        first = "\n".join(str(p.get("text", "")) for p in first
                           if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(first, str):
        return ""
    first = first.split(data_preview.MARK, 1)[0]  # the request, not what Lily attached
    text = first
    if first.startswith(_FORCED):  # "Use the skill 'x' for this request." and its input
        text = first.split("\n", 1)[0]
        given = first.rsplit(_ARGUMENTS, 1)[1].strip().split("\n", 1)[0] \
            if _ARGUMENTS in first else ""
        text = f"{text.removesuffix('.')}: {given}" if given else text
    text = " ".join(text.split())
    if len(text) <= REQUEST_CHARS:
        return text
    half = (REQUEST_CHARS - 3) // 2  # the start and the end, where the answer's form is stated
    return f"{text[:half]} … {text[-(REQUEST_CHARS - 3 - half):]}"


def restated(messages: list[dict[str, Any]], small: bool) -> list[dict[str, Any]]:
    """``messages`` as sent: in the small profile, after tool results, the last result
    ends with the request restated; otherwise unchanged (the same list)."""
    last = messages[-1] if messages else None
    request = request_of(messages)
    if not small or last is None or last.get("role") != "tool" or not request or \
            not isinstance(last.get("content"), str):
        return messages
    note = (f"\n\n(The user asked: {request} Answer now from this result, in the form the "
            "request asks for.)")
    return [*messages[:-1], {**last, "content": last["content"] + note}]
