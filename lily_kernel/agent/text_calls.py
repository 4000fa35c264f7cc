"""Tool calls written as text, and JSON arguments a model got slightly wrong (docs/agent.md#tool-calls-written-as-text).

Small open models often answer with the call itself as text instead of a structured
``tool_calls`` delta, in the shapes their chat templates taught them, and a server whose
parser does not recognise the shape passes it on as the answer. :func:`read` turns such an
answer into calls, deterministically, when — and only when — the **whole answer** is calls:
a sequence of *units* separated by whitespace or ``;``, each a JSON call object (or an
array of them); ``<tool_call>``, ``<tools>``, ``<tool>`` or ``<function_call>`` around
units; ``<function=NAME>`` or ``<function name="NAME">`` with a JSON object, ``<arguments>``
(JSON or XML elements) or ``<parameter=key>`` elements; ``[TOOL_CALLS]`` (Mistral);
``<|python_tag|>`` (Llama 3.x); or one call fence around such units (the table in the
docs names each format's origin). A closing tag or fence may be missing only at the very
end. A call object names the tool with ``name`` or ``function`` and its arguments with
``arguments`` or ``parameters`` (else its other keys are the arguments); besides those
only ``type`` and ``id`` may appear. Every name must be an offered tool, or a skill (which
becomes ``load_skill(name)``): one name that is neither and nothing runs. Any other text
around the units means the answer is an answer; :func:`shown_call` finds the one call such
an answer *shows* in a fence, which the loop asks the model once to make, never runs.

JSON is read by :func:`loads_lenient`, strictly first, then with a few repairs, each
deterministic and conservative: one code fence removed, doubled braces ``{{…}}`` made
single (also when the closing ones are unbalanced, ``{{"name": "list", "arguments":
{"path": "."}}}}``, the call as Qwen2.5's template text shows it), trailing commas
dropped, a Python literal (single quotes, ``True``/``None``) read with
:func:`ast.literal_eval`, a JSON string holding the JSON object decoded. The same
rules repair a structured call's malformed arguments (:func:`repair_arguments`).
"""
from __future__ import annotations

import ast
import html
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from lily_kernel import safejson

__all__ = ["FENCE_INFO", "TextCall", "loads_lenient", "read", "repair_arguments", "shown_call"]

LITERAL_CHARS = 20_000  # the longest text ast.literal_eval is asked to read
EXTRA_CLOSERS = 3  # closing braces after a doubled-brace call taken as its doubling
_TAGS = {"<tool_call>": "</tool_call>", "<tools>": "</tools>", "<tool>": "</tool>",
         "<function_call>": "</function_call>"}
FENCE_INFO = {"", "json", "xml", "tool_call", "tool_calls", "tool_code"}
_FUNCTION_EQ = re.compile(r"<function=([\w.\-]+)>")
_FUNCTION_NAME = re.compile(r"<function\s+name=[\"']([\w.\-]+)[\"']\s*>")
_ELEMENT = re.compile(r"<([A-Za-z_][\w.\-]*)>")  # an XML argument: <path>notes.txt</path>
_PARAMETER = re.compile(r"<parameter(?:=|\s+name=[\"'])([\w.\-]+)[\"']?>")
_MISTRAL_NAMED = re.compile(r"\s*([\w.\-]+)\[ARGS\]")
_PYTHON_TAG = "<|python_tag|>"
_TOOL_CALLS = "[TOOL_CALLS]"
_CALL_KEYS = {"name", "function", "arguments", "parameters", "type", "id"}
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_FENCED = re.compile(r"^[ \t]*```([^\n`]*)\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class TextCall:
    """One call read from an answer's text: the tool, its arguments as JSON text."""

    name: str
    arguments: str


class _NotCalls(Exception):
    """The text is not (only) calls."""


# -- JSON, strictly then leniently ------------------------------------------------------

def _unfence(text: str) -> str:
    """``text`` without one surrounding code fence (its info word one of the call fences)."""
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first, _, rest = text[3:-3].partition("\n")
        if first.strip().lower() in FENCE_INFO:
            return rest.strip()
    return text


def _without_trailing_commas(text: str) -> str:
    """``text`` with every comma before a closing bracket dropped, outside strings."""
    out, i, quote = [], 0, ""
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            out.append(ch)
        elif ch == ",":
            found = _TRAILING_COMMA.match(text, i)
            if not found:
                out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _strict(text: str) -> Any:
    return safejson.loads(text)


def _literal(text: str) -> Any:
    """A Python literal (dict, list, str, numbers, True/False/None) as JSON data."""
    if len(text) > LITERAL_CHARS:
        raise ValueError("too long for a literal")
    try:
        value = ast.literal_eval(text)
        return safejson.loads(json.dumps(value, allow_nan=False))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def loads_lenient(text: str) -> Any:
    """JSON ``text`` as data: strictly, else after the repairs the module docstring lists
    (in that order); ValueError when none reads it. Every value passes safejson's bounds."""
    text = text.strip()
    tries = [text]
    unfenced = _unfence(text)
    tries.append(unfenced)
    if unfenced.startswith("{{") and unfenced.endswith("}}"):
        tries.append(unfenced.replace("{{", "{").replace("}}", "}"))
    tries.append(_without_trailing_commas(tries[-1]))
    value: Any = None
    for attempt in dict.fromkeys(tries):  # each distinct text once, in order
        try:
            value = _strict(attempt)
            break
        except ValueError:
            continue
    else:
        for attempt in dict.fromkeys(tries[1:3]):
            try:
                value = _literal(attempt)
                break
            except ValueError:
                continue
        else:
            raise ValueError("not JSON, even after the repairs Lily tries")
    if isinstance(value, str) and value.strip().startswith(("{", "[")):  # JSON in a string
        try:
            return _strict(value.strip())
        except ValueError:
            return value
    return value


def repair_arguments(raw: str) -> dict[str, Any] | None:
    """A structured call's arguments that are not strict JSON, repaired (the rules of
    :func:`loads_lenient`), or None when they are not an object even then."""
    try:
        value = loads_lenient(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- the units of an answer ------------------------------------------------------------

def _balanced_end(text: str, start: int) -> int:
    """The index after the bracket that closes the one at ``start`` (strings in either
    quote skipped); :class:`_NotCalls` when it is not closed."""
    stack, i, quote = [], start, ""
    pairs = {"{": "}", "[": "]"}
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                raise _NotCalls
            if not stack:
                return i + 1
        i += 1
    raise _NotCalls


def _json_at(text: str, i: int) -> tuple[Any, int]:
    if text.startswith("{{", i):
        return _doubled_at(text, i)
    end = _balanced_end(text, i)
    try:
        return loads_lenient(text[i:end]), end
    except ValueError:
        raise _NotCalls from None


def _doubled_at(text: str, i: int) -> tuple[Any, int]:
    """A call with doubled braces as Qwen2.5's template text shows it, its closers perhaps
    unbalanced: one ``{`` dropped, the object read to its balanced end (doubled braces made
    single if need be), and up to :data:`EXTRA_CLOSERS` ``}`` after it taken as doubling."""
    end = _balanced_end(text, i + 1)
    after = end
    while after < len(text) and after - end < EXTRA_CLOSERS and text[after] == "}":
        after += 1
    for unit in (text[i + 1:end], text[i + 1:end].replace("{{", "{").replace("}}", "}")):
        try:
            return loads_lenient(unit), after
        except ValueError:
            continue
    raise _NotCalls


def _call_of(value: Any) -> tuple[str, Any]:
    """(name, arguments) of one call object; :class:`_NotCalls` for anything else."""
    if not isinstance(value, dict):
        raise _NotCalls
    fn = value.get("function")
    if isinstance(fn, dict):  # OpenAI's shape: {"type": "function", "function": {...}}
        if set(value) - {"function", "type", "id"}:
            raise _NotCalls
        value = {"name": fn.get("name"), **{k: v for k, v in fn.items() if k != "name"}}
    name = value.get("name") if "name" in value else value.get("function")
    if not isinstance(name, str) or ("name" in value and "function" in value):
        raise _NotCalls
    keys = [k for k in ("arguments", "parameters") if k in value]
    if len(keys) > 1:
        raise _NotCalls
    if keys:
        if set(value) - _CALL_KEYS:
            raise _NotCalls
        args = value[keys[0]]
    else:  # the short form: the other keys are the arguments
        args = {k: v for k, v in value.items() if k not in _CALL_KEYS}
    return name, args


def _calls_in(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, list):
        if not value:
            raise _NotCalls
        return [_call_of(v) for v in value]
    return [_call_of(value)]


def _skip(text: str, i: int, separators: str = "") -> int:
    while i < len(text) and (text[i].isspace() or text[i] in separators):
        i += 1
    return i


def _closing(text: str, i: int, close: str) -> int:
    """After an optional ``close`` at ``i`` (missing only at the end of ``text``)."""
    i = _skip(text, i)
    if text.startswith(close, i):
        return i + len(close)
    if i == len(text):
        return i
    raise _NotCalls


def _element_text(text: str, start: int, name: str) -> tuple[str, int]:
    """The raw text of an element opened just before ``start``, and the index after its
    ``</name>``; :class:`_NotCalls` when it is not closed."""
    close = f"</{name}>"
    end = text.find(close, start)
    if end < 0:
        raise _NotCalls
    return html.unescape(text[start:end].strip()), end + len(close)


def _xml_arguments(text: str, i: int, close: str) -> tuple[dict[str, Any], int]:
    """``<key>value</key>`` or ``<parameter=key>value</parameter>`` elements up to
    ``close``: each value its raw text (nested tags kept as text), or JSON when the
    value is a JSON object, array or number; the index after ``close``."""
    args: dict[str, Any] = {}
    while True:
        i = _skip(text, i)
        if close and text.startswith(close, i):
            return args, i + len(close)
        if not close and (i >= len(text) or text.startswith("</function>", i)):
            return args, i
        found = _PARAMETER.match(text, i)
        key, value_end = (found.group(1), "parameter") if found else (None, "")
        if found is None:
            found = _ELEMENT.match(text, i)
            if found is None:
                raise _NotCalls
            key = value_end = found.group(1)
        assert key is not None
        value, i = _element_text(text, found.end(), value_end)
        try:
            args[key] = safejson.loads(value) if value[:1] in "{[-0123456789" else value
        except ValueError:
            args[key] = value


def _function_body(text: str, i: int) -> tuple[Any, int]:
    """The arguments after ``<function …>``: a JSON object, ``<arguments>`` around a JSON
    object or XML elements, ``<parameter=key>`` elements, or nothing; and where they end."""
    j = _skip(text, i)
    if text.startswith("{", j):
        return _json_at(text, j)
    if text.startswith("<arguments>", j):
        k = _skip(text, j + len("<arguments>"))
        if text.startswith("{", k):
            args, end = _json_at(text, k)
            return args, _closing(text, end, "</arguments>")
        return _xml_arguments(text, k, "</arguments>")
    return _xml_arguments(text, j, "")


def _units(text: str, fenced: bool = False) -> list[tuple[str, Any]]:
    """Every call in ``text``, which must consist of units only (see the docstring)."""
    calls: list[tuple[str, Any]] = []
    i = _skip(text, 0)
    while i < len(text):
        if text.startswith("```", i) and not fenced:
            eol = text.find("\n", i)
            if eol < 0 or text[i + 3:eol].strip().lower() not in FENCE_INFO:
                raise _NotCalls
            close = text.find("```", eol)
            inner_end = close if close >= 0 else len(text)
            if close >= 0 and text[close + 3:].strip():
                raise _NotCalls  # one fence: nothing after it
            calls += _units(text[eol + 1:inner_end], fenced=True)
            i = len(text)
        elif (tag := next((t for t in _TAGS if text.startswith(t, i)), None)) is not None:
            close = text.find(_TAGS[tag], i)
            inner_end = close if close >= 0 else len(text)
            inner = text[i + len(tag):inner_end].strip()
            if not inner or inner[0] not in "{[<":
                raise _NotCalls
            if inner[0] == "<":  # <tools><function name="…">…</function></tools>
                found_inner = _units(inner, fenced=True)
                if not found_inner:
                    raise _NotCalls
                calls += found_inner
            else:
                value, end = _json_at(inner, 0)
                if inner[end:].strip():
                    raise _NotCalls
                calls += _calls_in(value)
            i = inner_end + len(_TAGS[tag]) if close >= 0 else len(text)
        elif (found := _FUNCTION_EQ.match(text, i) or _FUNCTION_NAME.match(text, i)):
            args, end = _function_body(text, found.end())
            calls.append((found.group(1), args))
            i = _closing(text, end, "</function>")
        elif text.startswith(_TOOL_CALLS, i):
            i += len(_TOOL_CALLS)
            while (named := _MISTRAL_NAMED.match(text, i)) is not None:
                j = _skip(text, named.end())
                if j >= len(text) or text[j] != "{":
                    raise _NotCalls
                args, i = _json_at(text, j)
                calls.append((named.group(1), args))
            i = _skip(text, i)
            if i < len(text) and text[i] in "{[":
                value, i = _json_at(text, i)
                calls += _calls_in(value)
            i = _closing(text, i, "</s>")
        elif text.startswith(_PYTHON_TAG, i):
            i += len(_PYTHON_TAG)
        elif text[i] in "{[":
            value, i = _json_at(text, i)
            calls += _calls_in(value)
        else:
            raise _NotCalls
        i = _skip(text, i, ";")
    return calls


def read(text: str, offered: Collection[str], skills: Collection[str] = ()) -> list[TextCall]:
    """The calls ``text`` consists of, or [] when it is an answer (see the module docstring).

    ``offered`` are the tool names this request offers; a name in ``skills`` (and not a
    tool) becomes ``load_skill`` with that name when ``load_skill`` is offered."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[<`":  # prose never starts a call
        return []
    try:
        found = _units(stripped)
    except (_NotCalls, RecursionError):
        return []
    out = []
    for name, args in found:
        if isinstance(args, str):  # arguments sent as JSON text
            args = repair_arguments(args)
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return []
        if name not in offered:
            if name in skills and "load_skill" in offered:
                name, args = "load_skill", {"name": name}
            else:
                return []
        out.append(TextCall(name, json.dumps(args, ensure_ascii=False)))
    return out


def shown_call(text: str, offered: Collection[str], skills: Collection[str] = ()) -> TextCall | None:
    """The one call an answer *shows* instead of making it: prose around exactly one code
    fence (the answer's only one, its info word one of the call fences) whose content is
    exactly one call :func:`read` accepts. None otherwise: such an answer is never run,
    the loop only asks the model once to make the call (docs/agent.md#loop-hygiene)."""
    if text.count("```") != 2:
        return None
    fence = _FENCED.search(text)
    if fence is None or fence.group(1).strip().lower() not in FENCE_INFO:
        return None
    if not (text[:fence.start()].strip() or text[fence.end():].strip()):
        return None  # the whole answer is the fence: read() runs it
    calls = read(fence.group(2), offered, skills)
    return calls[0] if len(calls) == 1 else None
