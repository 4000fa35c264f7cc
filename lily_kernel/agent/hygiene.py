"""Loop hygiene: what keeps a small model's request from going round in circles
(docs/agent.md#loop-hygiene).

- :func:`usage`: a tool's real signature and an example call, for every argument error.
- :func:`call_key`: a call's identity (tool and canonical arguments), so an identical call
  already answered in this request is not run again (:func:`already_answered`).
- :data:`ASK_AGAIN` and :func:`last_result`: an empty final answer after tool steps is
  asked for once more; still empty, the user sees the last tool result with a note.
- :class:`AnswerGuard`: the streamed answer, held back while it may be a call written as
  text, and stopped when it repeats itself or the offered tool list.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from lily_kernel.agent.text_calls import FENCE_INFO
from lily_kernel.settings.model_settings import ModelConfig

__all__ = ["ASK_AGAIN", "AnswerGuard", "AnswerStopped", "already_answered", "call_key",
           "echoes_ask", "last_result", "make_the_call", "repeated_tail", "usage"]

#: The one extra request after an empty final answer (never kept in the conversation).
ASK_AGAIN = {"role": "user", "content": (
    "(Lily) Your last answer was empty. Using the tool results above, answer my request "
    "now in plain text, without calling a tool.")}
ALREADY = "Already answered:"
#: The one extra request after a required call that ran on without end (stopped as it
#: repeated itself, or cut at the length limit): the call is broken, and greedy decoding
#: of the same prompt would run on the same way (agent/loop.py).
CALL_AGAIN = {"role": "user", "content": (
    "(Lily) Your last call ran on without end (it repeated itself) and was stopped. Make "
    "the call again, short: only what the request needs.")}
#: The one extra request after an answer that repeated the error of code that raised
#: (agent/small_steps.echoed_error), sent with a required run_python call, sampled at
#: :data:`SAMPLED_TEMPERATURE`: at 0 the 1.5B model wrote the code that raised once more
#: (DABench 300).
FIX_AGAIN = {"role": "user", "content": (
    "(Lily) Your last answer only repeated the error. Fix the line that raised and call "
    "run_python again with the corrected code.")}
#: The temperature of that one extra request, when the model's is lower: at 0 the same
#: prompt with the note still ran on the same way (DABench 177: the same line forty times).
SAMPLED_TEMPERATURE = 0.7


def sampled(config: ModelConfig) -> ModelConfig:
    """``config`` for the request after a call that ran on: sampled, not greedy."""
    if config.temperature is not None and config.temperature >= SAMPLED_TEMPERATURE:
        return config
    return config.changed(temperature=SAMPLED_TEMPERATURE)


def make_the_call(name: str, arguments: str) -> dict[str, str]:
    """The one extra request after an answer that showed a call to an offered tool inside
    prose instead of making it (never kept in the conversation)."""
    shown = arguments if len(arguments) <= 300 else arguments[:300] + "…"
    return {"role": "user", "content": (
        f"(Lily) Your last answer showed a call to {name} ({shown}) instead of making it. "
        "Do not show a call: make it now as a tool call, or, if no tool is needed, answer "
        "my request in plain text.")}
SHOWN_RESULT_CHARS = 4_000  # of the last tool result, when it is shown instead of an answer

# a chunk of 20-500 characters repeated at least 4 times in a row, over 600 characters at least
REPEAT_MIN, REPEAT_MAX, REPEAT_TIMES, REPEAT_SPAN = 20, 500, 4, 600
CHECK_EVERY = 32  # characters streamed between two checks of the repetition rule
_WORD = re.compile(r"[\w.\-]+")
_TAG_STARTS = ("<tool_call>", "<tools>", "<tool>", "<function", "<|python_tag|>")
_MISTRAL = "[TOOL_CALLS]"


# -- argument errors --------------------------------------------------------------------

def _type_of(prop: Mapping[str, Any]) -> str:
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    kinds = [p.get("type") for p in prop.get("anyOf", [])] if "anyOf" in prop else [prop.get("type")]
    return " | ".join(str(k) for k in kinds if k) or "any"


def _sample(name: str, prop: Mapping[str, Any]) -> Any:
    if "default" in prop:
        return prop["default"]
    if prop.get("enum"):
        return prop["enum"][0]
    kind = prop.get("type") or next((p.get("type") for p in prop.get("anyOf", [])
                                     if p.get("type") != "null"), None)
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {},
            "null": None}.get(str(kind), f"<{name}>")


def signature(name: str, schema: Mapping[str, Any]) -> str:
    """``read_cells(last: integer = 5)``: the tool's parameters, types and defaults."""
    props = schema.get("properties") or {}
    parts = []
    for arg, prop in props.items():
        text = f"{arg}: {_type_of(prop)}"
        if "default" in prop:
            text += f" = {json.dumps(prop['default'])}"
        parts.append(text)
    return f"{name}({', '.join(parts)})"


def example(name: str, schema: Mapping[str, Any]) -> str:
    """One call as JSON: the required arguments (or, with none required, none) with
    sample values — defaults, the first allowed value, or a ``<name>`` placeholder."""
    props = schema.get("properties") or {}
    required = schema.get("required") or []
    args = {arg: _sample(arg, props[arg]) for arg in required if arg in props}
    return json.dumps({"name": name, "arguments": args}, ensure_ascii=False)


def usage(name: str, schema: Mapping[str, Any]) -> str:
    """What every argument error adds: the real signature and an example call."""
    return f"the signature is {signature(name, schema)}; for example: {example(name, schema)}"


# -- repeated calls ------------------------------------------------------------------

def call_key(name: str, args: Mapping[str, Any]) -> str:
    """A call's identity: the tool and its arguments as canonical JSON."""
    return name + " " + json.dumps(args, sort_keys=True, ensure_ascii=False,
                                   separators=(",", ":"), default=str)


def already_answered(name: str, args: Mapping[str, Any], raised: bool = False) -> str:
    """The answer to an identical call made again in the same request. ``raised``: its
    earlier run raised, so the same code would raise the same way again: the next step
    worth taking is changed code, not an answer from that error (a 1.5B model told "use
    that result" after a ValueError answered with a guess, DABench dev 57)."""
    shown = json.dumps(dict(args), ensure_ascii=False, default=str)
    if len(shown) > 200:
        shown = shown[:200] + "…"
    if raised:
        return (f"{ALREADY} {name} {shown} is the same code that raised above; it would "
                "raise the same way again, so it was not run. Change the line that raised "
                f"and call {name} again.")
    return (f"{ALREADY} {name} {shown} was called earlier in this request and its "
            "result is above; it was not run again. Use that result, or answer the user.")


# -- an empty final answer ---------------------------------------------------------

def echoes_ask(text: str) -> bool:
    """Is ``text`` the model repeating :data:`ASK_AGAIN` (or a sentence of it) instead of
    answering? A small model did ("Your last answer was empty."): that is no answer."""
    said = " ".join(text.lower().replace("(lily)", "").split()).strip()
    return len(said) >= 12 and said in " ".join(ASK_AGAIN["content"].lower().split())


def _useless(name: str, content: str) -> bool:
    """A result that tells the user nothing: an "Already answered", an error, a skill's
    instructions or "already loaded"."""
    return content.startswith((ALREADY, "Error:")) or name == "load_skill"


def last_result(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(tool name, result) of the last useful tool result in ``messages`` (not an "Already
    answered", an error or a skill's instructions), else of the last one that is not an
    "Already answered", or None."""
    found = [(name, content) for name, content in _results(messages)
             if not content.startswith(ALREADY)]
    useful = [r for r in found if not _useless(*r)]
    if useful or found:
        return (useful or found)[-1]
    return None


def _results(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(tool name, result) of every tool result in ``messages``, in order."""
    out = []
    for i, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        call_id = message.get("tool_call_id")
        name = "a tool"
        for earlier in reversed(messages[:i]):
            for call in earlier.get("tool_calls") or []:
                if call.get("id") == call_id:
                    name = call["function"]["name"]
            if earlier.get("tool_calls"):
                break
        out.append((name, str(message.get("content") or "")))
    return out


def shown_result(name: str, result: str) -> str:
    """The last tool result as the answer's text, with the note that says why."""
    text = result if len(result) <= SHOWN_RESULT_CHARS else (
        result[:SHOWN_RESULT_CHARS] + f"\n[… {len(result) - SHOWN_RESULT_CHARS:,} more characters]")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return (f"*(The model gave no final answer, even when asked again; this is the last tool "
            f"result, from `{name}`.)*\n\n{fence}text\n{text}\n{fence}")


# -- the streamed answer -----------------------------------------------------------

class AnswerStopped(Exception):
    """Raised by :meth:`AnswerGuard.feed` to stop reading the stream: the answer repeats."""


def may_be_call(text: str) -> bool:
    """Could ``text`` (the answer so far) still become a call written as text
    (lily_kernel/agent/text_calls.py)? A code fence other than a call's, a Markdown link
    or any prose is not held back."""
    head = text.lstrip()
    if len(head) < 2:
        return True
    if head.startswith("```"):
        line, newline, rest = head[3:].partition("\n")
        if not newline:
            return len(line) <= 12
        return line.strip().lower() in FENCE_INFO and may_be_call(rest)
    if head[0] == "{":
        return True
    if head[0] == "[":
        if head.startswith(_MISTRAL) or _MISTRAL.startswith(head):
            return True
        rest = head[1:].lstrip()
        return not rest or rest[0] == "{"
    return head[0] == "<" and any(head.startswith(t) or t.startswith(head) for t in _TAG_STARTS)


def _period(chunk: str) -> int:
    """The shortest p such that ``chunk`` is its first p characters repeated."""
    n = len(chunk)
    return next(p for p in range(1, n + 1) if n % p == 0 and chunk == chunk[:p] * (n // p))


def _times(size: int) -> int:
    """How many copies of a chunk of ``size`` characters make a runaway."""
    return max(REPEAT_TIMES, -(-REPEAT_SPAN // size))


def repeated_tail(text: str) -> int:
    """The length of the chunk ``text`` ends with in a row, :data:`REPEAT_TIMES` times and
    over :data:`REPEAT_SPAN` characters at least (:data:`REPEAT_MIN` to :data:`REPEAT_MAX`
    characters, and not itself a shorter chunk repeated: ``"ha ha ha "`` or a line of
    dashes is not a runaway), or 0. Ten lines of ``print("Hello, world!")`` are not one."""
    n = len(text)
    for size in range(REPEAT_MIN, REPEAT_MAX + 1):
        if size * _times(size) > n:
            break
        chunk = text[n - size:]
        if text.endswith(chunk * _times(size)):
            # the tail repeats a shorter chunk: every longer match would be made of it too
            return size if _period(chunk) >= REPEAT_MIN else 0
    return 0


class AnswerGuard:
    """Between the stream and the face: holds back an answer that may be a call written
    as text (shown with :meth:`release` once it is not one), and stops an answer that
    ends with the same chunk :data:`REPEAT_TIMES` times or names every offered tool twice
    (:class:`AnswerStopped`; :attr:`text` keeps one copy of the repeated chunk)."""

    TAIL = REPEAT_MAX * REPEAT_TIMES  # the characters the repetition rule reads

    def __init__(self, on_text: Callable[[str], None] | None, tools: Collection[str]) -> None:
        self.on_text = on_text
        self.counts = dict.fromkeys(tools, 0)  # how often each offered tool is named
        self.parts: list[str] = []
        self.tail = ""
        self.pending = ""  # streamed since the last check
        self.held: list[str] | None = []  # None once the answer cannot be a call
        self.stopped = ""  # why the answer was stopped, or ""
        self.text = ""  # the answer kept when it was stopped

    def feed(self, piece: str) -> None:
        """One streamed piece: checked, then shown, held back or (stopping) not shown."""
        self.parts.append(piece)
        self.pending += piece
        if len(self.pending) >= CHECK_EVERY:
            self._check()
        if self.held is not None:
            self.held.append(piece)
            if may_be_call("".join(self.held)):
                return
            piece, self.held = "".join(self.held), None
        if self.on_text is not None:
            self.on_text(piece)

    def _check(self) -> None:
        # names are counted up to the last character that cannot be part of one
        cut = max(self.pending.rfind(c) for c in " \n\t,;:\"'`()[]{}|")
        if cut < 0 and len(self.pending) > self.TAIL:  # no separator at all: read it whole
            cut = len(self.pending) - 1
        new, self.pending = self.pending[:cut + 1], self.pending[cut + 1:]
        self.tail = (self.tail + new)[-self.TAIL:]
        size = repeated_tail(self.tail)
        if size:
            text = "".join(self.parts)
            text = text[:len(text) - len(self.pending)]
            start = len(text) - size * _times(size)  # where the run of copies begins
            while start > 0 and text[start - 1] == text[start - 1 + size]:
                start -= 1
            self.stopped = "it repeated itself"
            self.text = text[:start + size]  # what came before, and one copy
            raise AnswerStopped
        if len(self.counts) < 3:
            return
        for word in _WORD.findall(new):
            if word in self.counts:
                self.counts[word] += 1
        if min(self.counts.values()) >= 2:
            self.stopped = "it repeated the tool list"
            self.text = "".join(self.parts)
            raise AnswerStopped

    def instead(self, text: str) -> None:
        """What :meth:`release` shows is ``text`` (the answer tool's text), not the call
        held back."""
        self.held = [text]

    def release(self) -> None:
        """The answer was not a call: show what was held back."""
        held, self.held = self.held, None
        if held and self.on_text is not None:
            self.on_text("".join(held))
