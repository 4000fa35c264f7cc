"""``/compact``: the earlier turns that no longer fit, replaced by a summary the
model writes (docs/agent.md#compact).

The turns the context budget (docs/agent.md#context-budget) would leave out
of the next request, with a quarter of the budget kept free, are sent to the
model as a transcript (its most recent part, when even that is too long) with
the request to summarise them; the summary replaces those turns in the
conversation, as a question and answer pair, and the user sees it. Nothing
changes when every turn still fits.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lily_kernel import redaction
from lily_kernel.agent import budget, model_client, prompt, request
from lily_kernel.errors import AgentError, ContextTooSmall, ModelError

ASK = "(/compact) Summarise our conversation so far."
INSTRUCTIONS = ("Summarise the conversation below for your own later use: the user's goals, "
                "decisions, facts, file names, numbers and open questions. Be brief; use a "
                "bulleted list; do not invent anything.")
PROBE = {"role": "user", "content": "(the next request)"}
SPARE = 0.25  # a quarter of the budget is kept for the summary and the next requests


@dataclass
class Compacted:
    """What ``/compact`` did: how many turns the summary replaced, and the summary."""
    turns: int
    summary: str
    usage: dict[str, int] | None


def _transcript(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        content = m.get("content") or ""
        if m.get("role") == "tool" and len(content) > budget.SHORT_CHARS:
            content = content[:budget.SHORT_CHARS] + " […]"
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            content += f"\n(called {fn.get('name')} {fn.get('arguments', '')[:200]})"
        lines.append(f"{m.get('role', '?')}: {content.strip()}")
    return "\n\n".join(lines)


def compact(session: Any, on_text: Callable[[str], None] | None = None) -> Compacted | None:
    """Summarise the turns the next request would leave out; None when every turn fits.
    Raises :class:`AgentError` (one line) when no model can be asked."""
    problem = session.config_error or model_client.not_configured(session.environ,
                                                           session.model_config)
    if problem:
        raise AgentError(problem)
    config = session.model_config
    system = {"role": "system",
              "content": prompt.system_prompt(session.persona, session.snapshot)}
    history = list(session.conversation)
    try:
        fitted = session.budget.fit(config, system, request.offered_tools(session), history,
                                    [PROBE], spare=SPARE)
    except ContextTooSmall as exc:
        raise AgentError(str(exc)) from None
    if not fitted.turns_dropped:
        return None
    first = budget.turn_end(history, fitted.turns_dropped)
    count = session.budget.counter(config.model)
    room = fitted.limit - count.text(INSTRUCTIONS) - 2 * 8  # two messages' overhead
    text = _transcript(history[:first])
    while text and count.text(text) > room:  # keep the most recent part that fits
        text = text[len(text) // 5:]
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": text}]
    openai_client = session.model_clients.get(config, session.environ)
    try:
        turn = model_client.complete(openai_client, config, messages, [], on_text,
                              max_chars=session.limits.answer_chars,
                              max_tokens=fitted.max_tokens)
    except ModelError as exc:
        raise AgentError(redaction.redact(str(exc), session.environ)) from None
    session.add_usage(turn.usage)
    summary = turn.content.strip() or "(the model wrote no summary)"
    session.replace_turns(first, [{"role": "user", "content": ASK},
                                  {"role": "assistant", "content": summary}],
                          fitted.turns_dropped)
    return Compacted(fitted.turns_dropped, summary, turn.usage)
