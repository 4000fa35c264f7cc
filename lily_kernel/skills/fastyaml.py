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
returns :data:`FALLBACK` and the caller uses PyYAML. ``tests/skills/test_fastyaml.py``
checks the two agree on generated documents.

The parser is two loops with their helpers inlined (they run once per skill, and calls
are most of what a Python parser of ten short lines costs). The only state kept between
calls is the classification of strings (pure functions of the string, in tables of bounded
size): of key and value texts, of indented keys, and of lines without ": ". A value text is
checked and classified once, then looked up; a flow list is split once, and each use gets a
new list of its items.

The first loop reads the usual documents: those without "#" (no comments). Each line is
split at its last ": " (a line with two has a key with ":" in it, which no key of the
subset has: the first loop leaves it to the second). A top-level ``key: value`` line with a
key known to be good stores its value; an indented ``key: value`` line is looked up whole
(``_padded``: its key and its indentation), as is a line without ": " (``_heads``: a
``key:`` line, a block list item ``- value`` with its indentation and value, or a line of
spaces), so a block's lines cost one lookup each. Duplicate keys are not looked for line by
line: every line read stores one entry (a blank line none), so the document has none when
the mappings and lists hold as many entries as it has such lines; when they hold fewer, or
any line is not one of these, the second loop reads the document from its start. In a
clean document (no backslash or "#", each character printable, line ends apart: in one
pass, in C; in ASCII ``_PRINTABLE`` leaves its bytes as they are, beyond it ``str.isprintable``,
which no character YAML refuses or reads as a break passes, nor any _remember leaves to
PyYAML), a value text that starts with a character no indicator or resolver claims, or with
one of "yYnNtTfFoO" when it is not a bool or null word, with no ":" or space at its end, is
that very string (no ": " is in it: the line was split at its last):
it is taken as it stands, without a lookup (most names and descriptions are seen once, so a
lookup would only miss). So is a value text ``"..."`` or ``'...'`` with no other quote of its
kind in it: its value is the text between the quotes (version strings are quoted, and each
is seen once). :func:`_is_plain` and :func:`_is_quoted` say what these two shortcuts take.

The second loop reads every document the first one does not (comments, a key: line followed
by spaces, a quoted value with ": " in it, anything that falls back): line by line, as the
first loop was written to agree with, and it alone answers :data:`FALLBACK`. It takes the
same two shortcuts in a clean document, and in one clean but for its "#",
a plain value text then only with no " #" in it (no comment after it).
"""
from __future__ import annotations

import re
from typing import Any

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
# First characters of a plain scalar that is a string whatever follows (no indicator,
# no implicit resolver): with no ": " or " #" in it and no ":" at its end, it is itself.
_PLAIN_FIRST = frozenset(c for c in map(chr, range(0x21, 0x7F))
                         if c not in _INDICATORS and c not in _IMPLICIT)
_NOTHING: frozenset[str] = frozenset()
# First characters of a plain scalar PyYAML's resolver reads as a bool or null only when it is
# one of those words: any other plain scalar starting with one of them is a string.
_WORDS = frozenset(_BOOL) | _NULL
_WORDY = frozenset(c for c, resolvers in _IMPLICIT.items()
                   if c and c.isalpha() and {tag for tag, _ in resolvers} <= {
                       "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"})
_QUOTES = frozenset("\"'")

# Characters YAML refuses, or reads as line breaks or a byte-order mark: leave them to
# PyYAML, with tabs and backslashes (escapes are PyYAML's business too). See _unsafe.
_SPECIAL = re.compile("[^\x0A\x20-\x7E\xA0-\u2027\u202A-\uD7FF\uE000-\uFEFE\uFF00-\uFFFD"
                      "\U00010000-\U0010FFFF]")


class _Marker:
    """What a value text is when it is not (or not yet) a value."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<fastyaml.{self.name}>"


_MISS = _Marker("MISS")  # not classified yet
_OUT = _Marker("OUT")  # outside the subset: PyYAML decides
_EMPTY = _Marker("EMPTY")  # nothing but spaces: "key:" opens a block

# Value text as it follows ": " or "- ", spaces and all -> its value, a flow list's items
# (a tuple: each use gets a new list of them) or a marker; key text -> itself if it is a
# key of the subset (the mappings then share one copy of each key), else False. Only the
# classification of a string is kept (a pure function of it), never a document; each
# table is emptied when full.
_values: dict[str, object] = {}
_keys: dict[str, str | bool] = {}
_CACHE_MAX = 4096
# Indented key text (spaces, then a key) -> (the key, as in _keys; the number of spaces),
# or False when it is not one; a line without ": " -> what _head makes of it.
_padded: dict[str, tuple[str, int] | bool] = {}
_heads: dict[str, object] = {}
# The first loop's lookups (the tables are emptied, never replaced, so these stay theirs).
_vget, _kget, _pget, _hget = _values.get, _keys.get, _padded.get, _heads.get
# Maps each byte of printable ASCII but "\\", and "\n", to itself and any other byte to
# another: translate leaves such a document unchanged (clean, then, when it has no "#").
_PRINTABLE = bytes(c if c == 0x0A or (0x20 <= c < 0x7F and c != 0x5C) else c ^ 1
                   for c in range(256))


def parse(source: str) -> Any:
    """The mapping ``source`` denotes, or :data:`FALLBACK` when it is outside the subset.

    A document without keys (blank lines and comments only) is ``None``, as in PyYAML.
    """
    # No character is left unchecked: keys must match _KEY, value text is checked by
    # _remember (once per distinct text) or by _is_plain / _is_quoted in a clean document,
    # comments by _unsafe, and the rest is spaces.
    out: dict[str, Any]
    # (Any: the loops tell types apart by identity and __class__, which mypy cannot follow)
    known: Any  # a key known to be good (str), or False
    item: Any  # a value, a flow list's items (a tuple), or one of the markers
    block: Any  # the key of an open "key:" line, while its indented lines are read
    value: Any  # that block's list or mapping, once its first item is seen
    hit: Any  # what _padded or _heads says of an indented key or a line without ": "
    target: Any  # the mapping a "key: value" line goes into
    # Clean (see the module's docstring): printable, no backslash, no "#".
    if source.isascii():
        data = source.encode("ascii")
        printable = data.translate(_PRINTABLE) == data
    else:
        printable = "\\" not in source and source.replace("\n", " ").isprintable()
    fast = "#" not in source
    if printable and fast:
        plain, quotes, wordy = _PLAIN_FIRST, _QUOTES, _WORDY  # see _is_plain and _is_quoted
    else:
        plain = quotes = wordy = _NOTHING
        if printable:  # clean but for "#": the second loop's shortcuts
            plain, quotes = _PLAIN_FIRST, _QUOTES
    if fast:  # the first loop (see the module's docstring); any surprise: break
        lines = source.split("\n")
        out = {}
        block = value = None
        stored = skipped = 0  # entries of closed blocks; lines that store none
        mcut = lcut = -1  # the open block's indentation, once it is a mapping or a list
        for line in lines:
            key, sep, raw = line.rpartition(": ")
            if sep:
                if block is not None:
                    hit = _pget(key)
                    if hit is None:
                        hit = _pad_key(key)
                    if hit:
                        known, ind = hit
                        if ind != mcut:
                            if value is not None:
                                break
                            mcut = ind
                            value = {}
                        target = value
                    else:
                        out[block] = value
                        if value is not None:
                            stored += len(value)
                        block = value = None
                        mcut = lcut = -1
                        known = _kget(key) or _key_ok(key)  # (a bad key is checked again)
                        if not known:
                            break
                        target = out
                else:
                    known = _kget(key) or _key_ok(key)
                    if not known:
                        break
                    target = out
                if raw:
                    first = raw[0]
                    if first in plain and raw[-1] not in " :":
                        target[known] = raw
                        continue
                    if first in quotes:
                        text = raw[1:-1]
                        if raw[-1] == first and first not in text and raw != first:
                            target[known] = text
                            continue
                    elif first in wordy and raw not in _WORDS and raw[-1] not in " :":
                        target[known] = raw
                        continue
                item = _vget(raw, _MISS)
                if item.__class__ is tuple:  # a flow list's items: a new list of them
                    item = [*item]
                elif item.__class__ is _Marker:
                    if item is not _MISS:
                        break
                    item = _remember(raw)
                    if item.__class__ is tuple:
                        item = [*item]
                    elif item.__class__ is _Marker:
                        break
                target[known] = item
                continue
            if not line:
                skipped += 1
                continue
            hit = _hget(line)
            if hit is None:
                hit = _head(line)
            if hit.__class__ is tuple:  # a block list item
                ind, item = hit
                if ind == lcut:
                    value.append(item)
                    continue
                if value is not None or block is None:
                    break
                lcut = ind
                value = [item]
                continue
            if hit.__class__ is str:  # "key:"
                if block is not None:
                    out[block] = value
                    if value is not None:
                        stored += len(value)
                block = hit
                value = None
                mcut = lcut = -1
                continue
            if hit is _EMPTY:
                skipped += 1
                continue
            break
        else:
            if block is not None:
                out[block] = value
                if value is not None:
                    stored += len(value)
            if len(out) + stored == len(lines) - skipped:  # else a duplicate key
                return out or None
    # The second loop: the general path, and the usual line's shorter one.
    vget, kget, marker, miss = _values.get, _keys.get, _Marker, _MISS
    out = {}
    block = value = None
    indent = 0  # the block's indentation, set by its first item
    pad = ""  # a block mapping's indentation, as text
    for line in source.split("\n"):
        key, sep, raw = line.partition(": ")
        if sep:
            # The usual "key: value" line, with a key known to be good: at the top level
            # (so the line starts with none of " -#"; it ends any open block), or in an
            # open block mapping at its indentation. This is what the general path below
            # makes of it, in fewer steps; any other line goes on to that path.
            if block is not None and line[0] == " ":
                if value is None:  # the block's first line: a good key makes it a mapping
                    text = key.lstrip(" ")
                    known = kget(text)
                    if known:
                        indent = len(key) - len(text)
                        pad = key[:indent]
                        value = {}
                elif value.__class__ is dict and key[:indent] == pad:
                    known = kget(key[indent:])
                else:
                    known = None
                target = value
            else:
                known = kget(key)
                if known and block is not None:
                    out[block] = value
                    block = value = None
                target = out
            if known and known not in target:
                if raw:
                    first = raw[0]
                    if (first in plain and raw[-1] not in " :" and ": " not in raw
                            and (fast or " #" not in raw)):  # (no "#": no comment after it)
                        target[known] = raw  # _is_plain, inlined
                        continue
                    if first in quotes and raw[-1] == first and raw.count(first) == 2:
                        target[known] = raw[1:-1]  # _is_quoted, inlined
                        continue
                item = vget(raw, miss)
                if item is miss:
                    item = _remember(raw)
                if item.__class__ is tuple:  # a flow list
                    item = [*item]
                elif item.__class__ is marker:
                    if item is _EMPTY and target is out:
                        block = known  # "key:" and spaces: a block may follow
                        continue
                    else:  # outside the subset, or a deeper level
                        return FALLBACK
                target[known] = item
                continue
        elif line[-1:] == ":":
            known = kget(line[:-1])
            if known:
                # "key:", a key known to be good: it ends any open block and opens one.
                if block is not None:
                    out[block] = value
                    block = value = None
                if known not in out:
                    block = known
                    continue
        if not line:
            continue
        first = line[0]
        if first in " -#":
            if first == "#":
                if _unsafe(line):
                    return FALLBACK
                continue
            # ``text`` is the line up to its first ": ", without the indentation.
            if first == " ":
                text = key.lstrip(" ")
                if not text:
                    if sep:
                        return FALLBACK  # "  : value"
                    continue  # a blank line
                if text[0] == "#":
                    if _unsafe(line):
                        return FALLBACK
                    continue  # a comment, at any indentation
                ind = len(key) - len(text)
            else:  # "-" in column 0: a block list item right under its key
                text = key
                ind = 0
            if block is None:
                return FALLBACK  # an indented line outside a block
            if value is None:  # the first item decides: a list, or a mapping
                indent = ind
                if text[:2] == "- ":
                    value = []
                elif ind == 0:
                    return FALLBACK
                else:
                    value = {}
                    pad = key[:ind]  # the block's indentation (spaces), for the usual line above
            elif ind != indent:
                return FALLBACK
            if value.__class__ is list:
                if text[:2] != "- ":
                    return FALLBACK
                raw = line[ind + 2:]
                item = vget(raw, miss)
                if item is miss:
                    item = _remember(raw)
                if item.__class__ is marker or item.__class__ is tuple:
                    return FALLBACK  # empty, outside the subset, or a flow list
                value.append(item)
                continue
            if not sep:
                return FALLBACK  # "sub:" opens a deeper level, or no key at all
            known = kget(text)
            if known is None:
                known = _key_ok(text)
            if not known or known in value:
                return FALLBACK
            item = vget(raw, miss)
            if item is miss:
                item = _remember(raw)
            if item.__class__ is tuple:
                item = [*item]
            elif item.__class__ is marker:
                return FALLBACK
            value[known] = item
            continue

        # Any other top-level "key: value" or "key:" line; it ends any open block.
        if block is not None:
            out[block] = value
            block = value = None
        if not sep:
            key = line.rstrip(" ")
            if key[-1] != ":":
                return FALLBACK
            key = key[:-1]
        known = kget(key)
        if known is None:
            known = _key_ok(key)
        if not known or known in out:
            return FALLBACK  # duplicate keys: leave PyYAML's semantics to PyYAML
        key = known
        item = vget(raw, miss)
        if item is miss:
            item = _remember(raw)
        if item.__class__ is tuple:
            item = [*item]
        elif item.__class__ is marker:
            if item is _EMPTY:
                block = key  # an indented block list or mapping may follow
                continue
            return FALLBACK
        out[key] = item
    if block is not None:
        out[block] = value
    return out or None


def _pad_key(key: str) -> tuple[str, int] | bool:
    """``(the key, the number of spaces before it)`` if ``key`` is one or more spaces and a
    key of the subset, else False; kept in _padded."""
    text = key.lstrip(" ")
    known = _keys.get(text)
    if known is None:
        known = _key_ok(text)
    found: tuple[str, int] | bool = False
    if isinstance(known, str) and text != key:
        found = (known, len(key) - len(text))
    if len(_padded) >= _CACHE_MAX:
        _padded.clear()
    _padded[key] = found
    return found


def _head(line: str) -> object:
    """What a line without ": " is to :func:`parse`'s first loop: ``key:`` (the key, a str), a
    block list item ``- value`` (``(its indentation, its value)``), a line of spaces (_EMPTY),
    or none of these (False); kept in _heads. A list item's value is what _remember says of
    the text after "- ", as in the second loop."""
    found: object = False
    if line[-1] == ":":
        known = _keys.get(line[:-1])
        if known is None:
            known = _key_ok(line[:-1])
        if isinstance(known, str):
            found = known
    if found is False:
        text = line.lstrip(" ")
        if not text:
            found = _EMPTY
        elif text[:2] == "- ":
            ind = len(line) - len(text)
            raw = line[ind + 2:]
            item = _values.get(raw, _MISS)
            if item is _MISS:
                item = _remember(raw)
            if item.__class__ is not _Marker and item.__class__ is not tuple:  # (a flow list)
                found = (ind, item)
    if len(_heads) >= _CACHE_MAX:
        _heads.clear()
    _heads[line] = found
    return found


def _flow(raw: str) -> Any:
    """A one-line flow list of scalars, or _OUT."""
    raw = raw.strip(" ")
    if raw[-1] != "]":
        return _OUT
    inner = raw[1:-1]
    if "[" in inner or "]" in inner or "{" in inner or "}" in inner:
        return _OUT
    vget, marker = _values.get, _Marker
    out: list[object] = []
    for part in inner.split(","):
        item = vget(part, _MISS)
        if item is _MISS:
            item = _remember(part)
        if item.__class__ is marker or item.__class__ is tuple:
            if item is _EMPTY and not out and not inner.strip(" "):
                return out  # "[]" or "[ ]"
            return _OUT  # an empty item, one outside the subset (or a flow list: none has "[")
        out.append(item)
    return out


def _remember(raw: str) -> object:
    """Classify value text (see _values) and keep the answer."""
    text = raw.strip(" ")
    value: object
    if not text:
        value = _EMPTY
    elif not text.isprintable() or "\\" in text or (not text.isascii() and _unsafe(text)):
        value = _OUT  # (printable ASCII is " " to "~", what _unsafe allows of ASCII)
    elif text[0] in _PLAIN_FIRST and ": " not in text and " #" not in text and text[-1] != ":":
        value = text  # what _classify says of it, without the call
    elif text[0] == "[":
        flow = _flow(text)
        value = _OUT if flow is _OUT else tuple(flow)  # each use gets a new list of them
    else:
        value = _classify(text)
    if len(_values) >= _CACHE_MAX:
        _values.clear()
    _values[raw] = value
    return value


def _is_plain(raw: str, clean: bool) -> bool:
    """Whether value text ``raw`` of a clean document (no backslash or "#", every character
    printable: see parse) is, as it stands, a plain scalar that reads as a string; :func:`parse`'s first
    loop inlines it (its second loop, the part without _WORDY). True only where
    :func:`_remember` would classify ``raw`` as ``raw`` itself."""
    return (clean and bool(raw) and raw[-1] not in " :" and ": " not in raw
            and (raw[0] in _PLAIN_FIRST or (raw[0] in _WORDY and raw not in _WORDS)))


def _is_quoted(raw: str, clean: bool) -> bool:
    """Whether value text ``raw`` of a clean document (see _is_plain) is a quoted scalar
    with nothing around it and no quote of its kind inside, whose value is ``raw[1:-1]``;
    :func:`parse` inlines it. True only where :func:`_remember` would classify ``raw`` as
    ``raw[1:-1]`` (in a clean document a double-quoted scalar has no escapes)."""
    return (clean and bool(raw) and raw[0] in _QUOTES and raw[-1] == raw[0]
            and raw.count(raw[0]) == 2)


def _unsafe(text: str) -> bool:
    """Whether ``text`` has a character the fast path leaves to PyYAML (see _SPECIAL)."""
    if text.isascii():  # printable ASCII is exactly " " to "~"; text is one line
        return not text.isprintable() or "\\" in text
    return "\\" in text or "\t" in text or _SPECIAL.search(text) is not None


def _key_ok(key: str) -> str | bool:
    """``key`` if it is a key of the subset (a plain scalar that reads as a string), else False."""
    known = key if _KEY.match(key) and type(_classify(key)) is str else False
    if len(_keys) >= _CACHE_MAX:
        _keys.clear()
    _keys[key] = known
    return known


def _classify(raw: str) -> object:
    """The value of one plain or simply quoted scalar, or _OUT when PyYAML should decide."""
    if not raw:
        return _OUT
    first = raw[0]
    if first == '"' or first == "'":
        if len(raw) < 2 or raw[-1] != first or first in raw[1:-1]:
            return _OUT
        return raw[1:-1]
    if first in _INDICATORS or ": " in raw or " #" in raw or raw[-1] == ":":
        return _OUT
    for _tag, regexp in _IMPLICIT.get(first, ()):
        if regexp.match(raw):
            if raw in _BOOL:
                return _BOOL[raw]
            if raw in _NULL:
                return None
            return _OUT  # numbers, timestamps, merge keys: PyYAML decides
    return raw
