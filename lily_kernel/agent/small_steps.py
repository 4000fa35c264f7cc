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
"""
from __future__ import annotations

from typing import Any

from lily_kernel.tools import offering

REQUEST_CHARS = 300  # of the user's request, when restated after a tool result
_FORCED = "Use the skill '"  # commands.results.SkillRequest.prompt's first line
_ARGUMENTS = "\n\nARGUMENTS: "  # and the user's input after the body (skills.substitution)


def required_call(step: int, small: bool, tools: list[dict[str, Any]],
                  failed: set[str] | frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The ``response_format`` of this step, or None: in the small profile, a required call
    on the first step when tools are offered, and on the second when every call of the
    first failed (``failed``: their tools), to a tool other than those."""
    if not small or not tools or step > 2 or (step == 2 and not failed):
        return None
    left = [t for t in tools if t["function"]["name"] not in failed] if step == 2 else tools
    return offering.call_format(left) if left else None


def failed_tools(step_messages: list[dict[str, Any]]) -> set[str]:
    """The tools a step called when every one of its calls failed (an ``Error:`` result);
    else empty. ``step_messages``: the step's assistant message and its results."""
    if not step_messages or not step_messages[0].get("tool_calls"):
        return set()
    results = [m for m in step_messages[1:] if m.get("role") == "tool"]
    if not results or not all(str(m.get("content") or "").startswith("Error:") for m in results):
        return set()
    return {c["function"]["name"] for c in step_messages[0]["tool_calls"]}


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
    text = first
    if first.startswith(_FORCED):  # "Use the skill 'x' for this request." and its input
        text = first.split("\n", 1)[0]
        given = first.rsplit(_ARGUMENTS, 1)[1].strip().split("\n", 1)[0] \
            if _ARGUMENTS in first else ""
        text = f"{text.removesuffix('.')}: {given}" if given else text
    text = " ".join(text.split())
    return text if len(text) <= REQUEST_CHARS else text[:REQUEST_CHARS - 1] + "…"


def restated(messages: list[dict[str, Any]], small: bool) -> list[dict[str, Any]]:
    """``messages`` as sent: in the small profile, after tool results, the last result
    ends with the request restated; otherwise unchanged (the same list)."""
    last = messages[-1] if messages else None
    request = request_of(messages)
    if not small or last is None or last.get("role") != "tool" or not request or \
            not isinstance(last.get("content"), str):
        return messages
    note = f"\n\n(The user asked: {request} Answer now from this result.)"
    return [*messages[:-1], {**last, "content": last["content"] + note}]
