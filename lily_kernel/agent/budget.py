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
   shortened to what the window leaves, oldest first (at least their first 400
   characters); if even that does not fit, :class:`ContextTooSmall` says what to do.

The session's conversation itself is never changed: a later request with a
larger window sends it all again. An endpoint that answers with a
context-length error teaches the window; the request is fitted again and sent
once more.
"""
from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lily_kernel.agent import model_client
from lily_kernel.agent import tools_dropped as dropped
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


SMALL_WINDOW = 8_192  # the small-model profile at or below this window (profile "auto")
SMALL_PARAMS = 4e9  # ... or a model whose name says it has at most this many parameters
_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")


def params_of(model_name: str) -> float | None:
    """The parameter count a model's name states (``qwen2.5-coder-1.5b-instruct``: 1.5e9,
    ``SmolLM2-135M``: 1.35e8), or None."""
    found = _SIZE.findall(model_name.lower().rsplit("/", 1)[-1])
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e9 if unit == "b" else 1e6)


def profile_of(config: ModelConfig) -> str:
    """``small`` or ``full`` (docs/agent.md#small-model-profile): ``[model] profile``, or with
    ``auto`` ``small`` when the model's window is known to be at most 8,192 tokens (set,
    learned from the endpoint, or in the table) or its name says it has at most 4B
    parameters; not when 8,192 is only the default for a model name Lily does not know:
    that one may be capable, and gets every tool."""
    if config.profile != "auto":
        return config.profile
    window = config.context_window or known_window(config.model)
    size = params_of(config.model)
    small = (window is not None and window <= SMALL_WINDOW) or \
        (size is not None and size <= SMALL_PARAMS)
    return "small" if small else "full"


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


def _shorten(message: dict[str, Any], keep: int = SHORT_CHARS) -> dict[str, Any]:
    text = message.get("content") or ""
    head = text[:keep]
    return {**message, "content": f"{head}\n[… shortened: {len(text) - len(head):,} more "
                                  "characters not sent to keep the conversation in the "
                                  "model's context window …]"}


def _fit_result(message: dict[str, Any], tokens: int, room: int,
                count: Callable[[dict[str, Any]], int]) -> tuple[dict[str, Any], int]:
    """``message`` (a tool result of ``tokens`` tokens) shortened to about ``room`` tokens:
    its head, as long as the window leaves (at least SHORT_CHARS characters), with the
    marker. A few deterministic steps: the characters a token of this text takes, then
    the same again on the count of the shortened text."""
    text = message.get("content") or ""
    keep = len(text)
    short, new = message, tokens
    for _ in range(4):
        if new <= room or keep <= SHORT_CHARS:
            break
        per_token = keep / max(new, 1)
        keep = max(SHORT_CHARS, min(keep - 1, int(keep - (new - room) * per_token) - 64))
        short = _shorten(message, keep)
        new = count(short)
    return short, new


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
        #: whether the endpoint's chat template lacks tools (None: unknown); the loop sets it
        #: from agent/endpoint_info.py for each request
        self.lacks_tools: Callable[[], bool | None] = lambda: None
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
        if total > limit:  # 4. this request's own results, to what the window leaves
            skill_calls = {c["id"] for m in pending for c in m.get("tool_calls") or []
                           if c.get("function", {}).get("name") == "load_skill"}
            for i, message in enumerate(pending):
                if total <= limit:
                    break
                if _long_result(message) and message.get("tool_call_id") not in skill_calls:
                    room = now[i] - (total - limit)
                    current[i], new = _fit_result(message, now[i], room, count.message)
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
             max_chars: int | None, response_format: dict[str, Any] | None = None
             ) -> tuple[model_client.Turn, Fitted]:
        """Fit and send one model call (``response_format``: the small profile's required
        call). A context-length error teaches the window (and the endpoint's count); the
        call is fitted again and sent once more."""
        fitted = self.fit(config, system, tools, history, pending)
        try:
            turn = model_client.complete(openai_client, config, fitted.messages, tools, on_text,
                                         max_chars=max_chars, max_tokens=fitted.max_tokens,
                                         response_format=response_format)
            return self._checked(turn, config, tools, fitted), fitted
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
                turn = model_client.complete(openai_client, config, fitted.messages, tools,
                                             on_text, max_chars=max_chars,
                                             max_tokens=fitted.max_tokens,
                                             response_format=response_format)
                return self._checked(turn, config, tools, fitted), fitted
            except ContextExceeded as again:
                raise ContextTooSmall(
                    f"the model endpoint still said: {again.detail}; raise or lower "
                    "[model] context_window to the server's real size (/model "
                    "context_window=N), start afresh with /new, or offer fewer tools "
                    "(lily.toml [tools] offer)") from None


    def _checked(self, turn: model_client.Turn, config: ModelConfig,
                 tools: list[dict[str, Any]], fitted: Fitted) -> model_client.Turn:
        """``turn``, with a footer note when the server dropped the tools offered (never on
        a step that called one: the model saw them)."""
        if turn.tool_calls:
            return turn
        note = dropped.tools_dropped(turn.usage, fitted.tokens,
                                     self.counter(config.model).tools(tools), len(tools),
                                     self.lacks_tools)
        if note:
            turn.notes.append(note)
        return turn


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

