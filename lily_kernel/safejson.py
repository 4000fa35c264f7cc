r"""JSON from outside (a programmatic ``/skill`` call, a model's tool arguments), parsed safely.

:func:`loads` fails with one :class:`ValueError` line, never a traceback, on whatever it is
given: nesting deeper than :data:`MAX_DEPTH` (checked in one pass before parsing, so the
parser never recurses into it), integers longer than :data:`MAX_DIGITS` digits, ``NaN`` and
``Infinity``, and strings holding a lone surrogate (``"\\ud800"``), which no file, database
or socket can encode. See docs/limits-and-secrets.md#bad-input.
"""
from __future__ import annotations

import json
from typing import Any, NoReturn

from lily_kernel.errors import JSONInputError

MAX_DEPTH = 64
MAX_DIGITS = 100


def depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (one linear pass)."""
    deepest = level = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            if level > deepest:
                deepest = level
        elif ch in "]}":
            level -= 1
    return deepest


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise JSONInputError(f"a number with {len(text.lstrip('-')):,} digits is too long "
                             f"(at most {MAX_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_DIGITS * 4:
        raise JSONInputError(f"a number of {len(text):,} characters is too long")
    return float(text)


def _constant(name: str) -> NoReturn:
    raise JSONInputError(f"{name} is not a JSON number")


def loads(text: str) -> Any:
    """The JSON value of ``text``; :class:`JSONInputError` (one line) when it is not acceptable."""
    if text.count("[") + text.count("{") > MAX_DEPTH and depth(text) > MAX_DEPTH:
        raise JSONInputError(f"the JSON is nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except JSONInputError:
        raise
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"{exc.msg} (at character {exc.pos})") from None
    except (ValueError, RecursionError) as exc:
        raise JSONInputError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    _check_text(value, 0)
    return value


def _check_text(value: Any, level: int) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise JSONInputError(f"a string holds a lone surrogate ({value[exc.start]!r}), "
                                 "which is not valid text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, level + 1)
            _check_text(item, level + 1)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, level + 1)
