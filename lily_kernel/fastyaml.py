"""An exact fast path for the small YAML subset skill frontmatter is written in.

PyYAML spends ~200 µs constructing even a ten-line mapping; loading 10,000
skills would cost seconds. This module parses the common subset directly:

* top-level ``key: value`` lines, ``#`` comment lines, blank lines;
* values that are plain scalars, ``"double"`` quoted (no escapes) or
  ``'single'`` quoted (no inner quote), or flow lists ``[a, b]`` of those;
* ``key:`` followed by one indented level: a block list (``- item``) or a
  mapping of ``key: value`` lines.

Each plain scalar is classified by PyYAML's own resolver, so ``yes`` is still
``True`` and ``2024-01-01`` still falls back. Anything outside the subset —
a duplicate key, a tab, an indicator character, deeper nesting, a number —
returns :data:`FALLBACK` and the caller uses PyYAML. ``tests/test_fastyaml``
checks the two agree on generated documents.
"""
from __future__ import annotations

import re

import yaml

FALLBACK = object()

_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_BOOL = {"yes": True, "Yes": True, "YES": True, "true": True, "True": True, "TRUE": True,
         "on": True, "On": True, "ON": True, "no": False, "No": False, "NO": False,
         "false": False, "False": False, "FALSE": False, "off": False, "Off": False,
         "OFF": False}
_NULL = frozenset(("~", "null", "Null", "NULL"))
# PyYAML's own implicit-resolver table (first character -> [(tag, regexp)]),
# consulted exactly as yaml.resolver.BaseResolver.resolve does for a plain scalar.
_IMPLICIT = yaml.resolver.Resolver.yaml_implicit_resolvers

# Characters YAML refuses, or reads as line breaks or a byte-order mark: leave them to PyYAML.
_SPECIAL = re.compile("[^\x0A\x20-\x7E\xA0-\u2027\u202A-\uD7FF\uE000-\uFEFE\uFF00-\uFFFD"
                      "\U00010000-\U0010FFFF]")


class _Fallback(Exception):
    pass


_MISS = object()
_cache: dict[str, object] = {}  # plain scalar text -> value or _MISS (outside the subset)
_CACHE_MAX = 4096


def parse(source: str):
    """The mapping ``source`` denotes, or :data:`FALLBACK` when it is outside the subset."""
    if "\\" in source or "\t" in source or _SPECIAL.search(source):
        return FALLBACK
    try:
        return _parse(source.split("\n"))
    except _Fallback:
        return FALLBACK


def _parse(lines: list[str]) -> dict | None:
    out: dict = {}
    i, n = 0, len(lines)
    while i < n:
        line = lines[i].rstrip(" ")
        i += 1
        if not line or line[0] == "#":
            continue
        key, raw = _key_value(line)
        if key in out:
            raise _Fallback  # duplicate keys: leave PyYAML's semantics to PyYAML
        if raw:
            out[key] = _flow(raw) if raw[0] == "[" else _scalar(raw)
            continue
        # "key:" with no value: an indented block list or mapping may follow.
        j = i
        while j < n:
            nxt = lines[j]
            if nxt and nxt[0] != " " and nxt[0] != "-" and nxt[0] != "#" and nxt.strip(" "):
                break
            j += 1
        out[key] = _block(lines[i:j]) if j > i else None
        i = j
    return out or None


def _key_value(line: str) -> tuple[str, str]:
    key, colon, raw = line.partition(":")
    if not colon or not _KEY.match(key) or (raw and raw[0] != " "):
        raise _Fallback
    if type(_scalar(key)) is not str:  # a key must read as a plain string
        raise _Fallback
    return key, raw.lstrip(" ")


def _block(lines: list[str]):
    items = []
    for line in lines:
        text = line.strip(" ")
        if text and text[0] != "#":
            items.append((len(line) - len(line.lstrip(" ")), text))
    if not items:
        return None
    indent = items[0][0]
    if items[0][1][:2] == "- ":
        out = []
        for ind, text in items:
            if ind != indent or text[:2] != "- ":
                raise _Fallback
            out.append(_scalar(text[2:].lstrip(" ")))
        return out
    if indent == 0:
        raise _Fallback
    mapping: dict = {}
    for ind, text in items:
        if ind != indent:
            raise _Fallback
        key, raw = _key_value(text)
        if not raw or key in mapping:
            raise _Fallback
        mapping[key] = _flow(raw) if raw[0] == "[" else _scalar(raw)
    return mapping


def _flow(raw: str) -> list:
    if raw[-1] != "]":
        raise _Fallback
    inner = raw[1:-1].strip(" ")
    if not inner:
        return []
    out = []
    for part in inner.split(","):
        part = part.strip(" ")
        if "[" in part or "]" in part or "{" in part or "}" in part:
            raise _Fallback
        out.append(_scalar(part))
    return out


def _scalar(raw: str):
    value = _cache.get(raw, _MISS)
    if value is _MISS:
        value = _classify(raw)
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[raw] = value
    if value is _MISS:
        raise _Fallback
    return value


def _classify(raw: str):
    """The value of one plain or simply quoted scalar, or _MISS when PyYAML should decide."""
    if not raw:
        return _MISS
    first = raw[0]
    if first == '"' or first == "'":
        if len(raw) < 2 or raw[-1] != first or first in raw[1:-1]:
            return _MISS
        return raw[1:-1]
    if first in _INDICATORS or ": " in raw or " #" in raw or raw[-1] == ":":
        return _MISS
    for tag, regexp in _IMPLICIT.get(first, ()):
        if regexp.match(raw):
            if raw in _BOOL:
                return _BOOL[raw]
            if raw in _NULL:
                return None
            return _MISS  # numbers, timestamps, merge keys: PyYAML decides
    return raw
