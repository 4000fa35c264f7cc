"""The context budget: every request fits the model's window (docs/agent.md#context-budget).

Before each model call the conversation is fitted into
``context_window - reserve - margin`` tokens, where ``reserve`` is the answer's
room (``[model] max_tokens``, at most a quarter of the window; it is also what Lily asks
the endpoint for) and ``margin`` is 1/32 of the window (at least 32 tokens) for
the chat template's own tokens. What is left out is deterministic:

1. never the system prompt, the tool schemas, the current request (the user's
   message and every step since, the loaded skill's body included), or a tool
   call without its result;
2. first, earlier tool results are shortened, oldest first, to their head;
3. then earlier turns (a user message and everything up to the next one) are
   left out, oldest first;
4. last, this request's own tool results (never a ``load_skill`` body) are
   shortened; if even that does not fit, :class:`ContextTooSmall` says what to do.

The session's conversation itself is never changed: a later request with a
larger window sends it all again. An endpoint that answers with a
context-length error teaches the window; the request is fitted again and sent
once more.
"""
from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lily_kernel.agent import model_client
from lily_kernel.agent.tokens import Counter
from lily_kernel.errors import ContextExceeded, ContextTooSmall
from lily_kernel.settings.model_settings import ModelConfig

DEFAULT_WINDOW = 8_192
# Well-known model names (lowercase, matched at the start of the name or after a '-' / '/')
# and their context windows in tokens; the longest match wins. A server may run a model
# with a smaller window (llama.cpp's -c): its context-length error teaches the real one.
KNOWN_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000, "chatgpt-4o": 128_000, "gpt-4.1": 1_047_576, "gpt-4-turbo": 128_000,
    "gpt-4": 8_192, "gpt-3.5-turbo": 16_385, "gpt-5": 400_000, "o1": 200_000, "o3": 200_000,
    "o4-mini": 200_000, "smollm2": 8_192, "llama-3.1": 131_072, "llama3.1": 131_072,
    "llama-3.2": 131_072, "llama3.2": 131_072, "qwen2.5": 32_768, "mistral": 32_768,
    "gemma-2": 8_192, "gemma2": 8_192, "phi-3-mini-4k": 4_096,
}
SHORT_CHARS = 400  # an earlier tool result is shortened to this many characters


@functools.lru_cache(maxsize=64)  # a pure function of the name, asked at every model call
def known_window(model_name: str) -> int | None:
    """The built-in table's window for ``model_name``, or None when it is not listed."""
    name = model_name.lower().rsplit("/", 1)[-1].split(":", 1)[0]
    best = None
    for key, window in KNOWN_WINDOWS.items():
        matched = name.startswith(key) or f"-{key}" in name
        if matched and (best is None or len(key) > len(best[0])):
            best = (key, window)
    return best[1] if best else None


def window_of(config: ModelConfig) -> int:
    """The context window in force: ``[model] context_window``, else the table, else 8,192."""
    return config.context_window or known_window(config.model) or DEFAULT_WINDOW


def margin_of(window: int) -> int:
    """Tokens kept free for the chat template and counting error."""
    return max(32, window // 32)


def reserve_of(config: ModelConfig, window: int) -> int:
    """The answer's room: ``max_tokens``, at most a quarter of the window (also the cap
    sent), so that a small window still holds the prompt."""
    return max(1, min(config.answer_tokens(), window // 4))


@dataclass
class Fitted:
    """What one model call sends, and what was left out to make it fit."""
    messages: list[dict[str, Any]]
    turns_dropped: int
    results_shortened: int
    tokens: int  # the prompt as Lily counted it
    limit: int  # the prompt's budget
    max_tokens: int  # the completion cap sent


def _shorten(message: dict[str, Any]) -> dict[str, Any]:
    text = message.get("content") or ""
    head = text[:SHORT_CHARS]
    return {**message, "content": f"{head}\n[… shortened: {len(text) - len(head):,} more "
                                  "characters not sent to keep the conversation in the "
                                  "model's context window …]"}


def _long_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "tool" and isinstance(content, str) \
        and len(content) > SHORT_CHARS + 200


def _turn_starts(history: list[dict[str, Any]]) -> list[int]:
    """Where each turn begins: every user message (anything before the first is a turn)."""
    starts = [i for i, m in enumerate(history) if m.get("role") == "user"]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    return starts if history else []


def turn_end(history: list[dict[str, Any]], turns: int) -> int:
    """The index where the first ``turns`` turns of ``history`` end."""
    starts = _turn_starts(history)
    return starts[turns] if turns < len(starts) else len(history)


class Running:
    """Sizes of a conversation kept between requests: a request measures only the messages
    new since the last one, and the sum is at hand (issue 18: no per-request walk of the
    history). The history is checked to start with the very messages measured (one pass in C:
    ``map``, ``operator.is_``, ``all``); anything else (``/new``, ``/compact``, another model's
    counter) measures it afresh."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.sizes: list[int] = []
        self.total = 0
        self._of: object = None

    def update(self, history: list[dict[str, Any]], measure: Callable[[dict[str, Any]], int],
               of: object = None) -> Running:
        """Bring the sizes up to ``history`` (measured with ``measure``, valid for ``of``)."""
        n = len(self.seen)
        if of != self._of or len(history) < n or not all(map(operator.is_, history, self.seen)):
            self.seen, self.sizes, self.total, self._of, n = [], [], 0, of, 0
        if len(history) > n:
            new = history[n:]
            sizes = list(map(measure, new))
            self.seen += new
            self.sizes += sizes
            self.total += sum(sizes)
        return self


class Budget:
    """One session's token accounting: counters per model, the fit, the learned window.

    ``learn(window)`` is called when an endpoint names its context size;
    ``record(entry)`` journals a fit that left something out.
    """

    def __init__(self, learn: Callable[[int], None] | None = None,
                 record: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._learn = learn
        self._record = record
        self._counter: Counter | None = None
        self._short: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._chars: dict[int, tuple[dict[str, Any], int]] = {}
        self._history_chars = Running()
        self._history_tokens = Running()

    def history_chars(self, history: list[dict[str, Any]]) -> int:
        """:meth:`chars` summed over ``history``, measuring only messages new since the last
        call (the conversation grows between requests)."""
        return self._history_chars.update(history, self.chars).total

    def chars(self, message: dict[str, Any]) -> int:
        """Characters of ``message`` as JSON (the conversation size cap, docs/agent.md),
        cached by identity like the token counts: a message is never changed once sent."""
        hit = self._chars.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        size = len(json.dumps(message, default=str))
        if len(self._chars) > 100_000:  # a bound, not a policy: measuring again is cheap
            self._chars.clear()
        self._chars[id(message)] = (message, size)
        return size

    def counter(self, model_name: str) -> Counter:
        """The token counter for ``model_name`` (kept while the model stays the same)."""
        if self._counter is None or self._counter.model != model_name:
            self._counter = Counter(model_name)
        return self._counter

    def _short_of(self, message: dict[str, Any]) -> dict[str, Any]:
        hit = self._short.get(id(message))
        if hit is None or hit[0] is not message:
            hit = (message, _shorten(message))
            self._short[id(message)] = hit
        return hit[1]

    def fit(self, config: ModelConfig, system: dict[str, Any], tools: list[dict[str, Any]],
            history: list[dict[str, Any]], pending: list[dict[str, Any]],
            spare: float = 0.0) -> Fitted:
        """The messages to send for this step; :class:`ContextTooSmall` when nothing fits.
        ``spare``: a share of the budget to keep free besides ``pending`` (``/compact``)."""
        count = self.counter(config.model)
        window = window_of(config)
        reserve = reserve_of(config, window)
        limit = window - reserve - margin_of(window)
        limit -= int(limit * spare)
        fixed = count.message(system) + count.tools(tools)
        now = [count.message(m) for m in pending]
        running = self._history_tokens.update(history, count.message, (count, count.scale))
        total = fixed + sum(now) + running.total
        if total <= limit:  # everything fits: nothing else to look at (the usual case)
            return Fitted([system, *history, *pending], 0, 0, total, limit, reserve)
        sizes = list(running.sizes)
        sent, shortened = list(history), 0
        if total > limit:  # 2. earlier tool results, oldest first
            for i, message in enumerate(history):
                if total <= limit:
                    break
                if _long_result(message):
                    sent[i] = self._short_of(message)
                    new = count.message(sent[i])
                    total, sizes[i], shortened = total - sizes[i] + new, new, shortened + 1
        dropped, first = 0, 0
        starts = _turn_starts(history) if total > limit else []  # a scan only when needed
        while total > limit and dropped < len(starts):  # 3. earlier turns, oldest first
            end = starts[dropped + 1] if dropped + 1 < len(starts) else len(history)
            total -= sum(sizes[first:end])
            dropped, first = dropped + 1, end
        current = list(pending)
        if total > limit:  # 4. this request's own results, never a skill's body
            skill_calls = {c["id"] for m in pending for c in m.get("tool_calls") or []
                           if c.get("function", {}).get("name") == "load_skill"}
            for i, message in enumerate(pending):
                if total <= limit:
                    break
                if _long_result(message) and message.get("tool_call_id") not in skill_calls:
                    current[i] = self._short_of(message)
                    new = count.message(current[i])
                    total, now[i], shortened = total - now[i] + new, new, shortened + 1
        if total > limit:
            n = len(tools)
            raise ContextTooSmall(
                f"this request does not fit the model's context window: the system prompt, "
                f"{n} tool schema{'s' if n != 1 else ''} and the request need about "
                f"{total:,} tokens, but context_window {window:,} leaves {max(limit, 0):,} "
                f"after max_tokens {reserve:,}; raise it (/model context_window=N), start "
                "afresh with /new, or offer fewer tools (lily.toml [tools] offer)")
        fitted = Fitted([system, *sent[first:], *current], dropped, shortened, total, limit,
                        reserve)
        if (dropped or shortened) and self._record is not None and not spare:
            self._record({"event": "context_fitted", "turns_not_sent": dropped,
                          "results_shortened": shortened, "prompt_tokens": total,
                          "budget": limit, "context_window": window, "counted": count.method})
        return fitted

    def send(self, openai_client: Any, config: ModelConfig, system: dict[str, Any],
             tools: list[dict[str, Any]], history: list[dict[str, Any]],
             pending: list[dict[str, Any]], on_text: Callable[[str], None] | None,
             max_chars: int | None) -> tuple[model_client.Turn, Fitted]:
        """Fit and send one model call. A context-length error teaches the window (and the
        endpoint's count); the call is fitted again and sent once more."""
        fitted = self.fit(config, system, tools, history, pending)
        try:
            return model_client.complete(openai_client, config, fitted.messages, tools, on_text,
                                  max_chars=max_chars, max_tokens=fitted.max_tokens), fitted
        except ContextExceeded as exc:
            window = exc.window or window_of(config)
            if exc.requested:
                self.counter(config.model).calibrate(fitted.tokens, exc.requested)
            if self._learn is not None and 0 < window < window_of(config):
                self._learn(window)
                config = config.changed(context_window=str(window))
            try:
                fitted = self.fit(config, system, tools, history, pending)
            except ContextTooSmall as small:
                raise ContextTooSmall(f"the model endpoint said: {exc.detail}; {small}") from None
            try:
                return model_client.complete(openai_client, config, fitted.messages, tools, on_text,
                                      max_chars=max_chars,
                                      max_tokens=fitted.max_tokens), fitted
            except ContextExceeded as again:
                raise ContextTooSmall(
                    f"the model endpoint still said: {again.detail}; raise or lower "
                    "[model] context_window to the server's real size (/model "
                    "context_window=N), start afresh with /new, or offer fewer tools "
                    "(lily.toml [tools] offer)") from None


def parts(config: ModelConfig, system_parts: dict[str, str],
          tools: list[dict[str, Any]], budget: Budget, source: str | None = None
          ) -> dict[str, Any]:
    """Token counts of each fixed part of a request, for ``/model``."""
    count = budget.counter(config.model)
    out: dict[str, Any] = {name: count.text(text) for name, text in system_parts.items()}
    out["tools"] = count.tools(tools)
    out["tool_count"] = len(tools)
    window = window_of(config)
    out.update(context_window=window, max_tokens=reserve_of(config, window),
               margin=margin_of(window), counted=count.method,
               window_from=((source or "setting") if config.context_window else
                            "table" if known_window(config.model) else "default"))
    return out

