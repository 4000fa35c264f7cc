"""Split a SKILL.md into YAML frontmatter and body, and parse the YAML safely.

Rules (docs/skill-format.md#reading): a UTF-8 BOM is stripped, CRLF is accepted, frontmatter exists
only when the first line is exactly ``---`` and ends at the next line that is
exactly ``---``. The YAML must be a mapping; anchors, aliases and explicit tags
are refused; frontmatter over 64 KiB, nesting deeper than 64 levels and files over 256 KiB
are errors.
"""
from __future__ import annotations

from typing import Any

import yaml

from lily_kernel.errors import FrontmatterError

MAX_FILE_BYTES = 256 * 1024
MAX_FRONTMATTER_BYTES = 64 * 1024

_Loader: type[yaml.SafeLoader] | type[yaml.CSafeLoader]
try:  # libyaml, an order of magnitude faster than pure Python; PyYAML's wheels ship it.
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - only on a PyYAML built without libyaml
    _Loader = yaml.SafeLoader

_FORBIDDEN_TOKENS = {
    yaml.AnchorToken: "anchors (&name) are not allowed",
    yaml.AliasToken: "aliases (*name) are not allowed",
    yaml.TagToken: "explicit tags (!tag) are not allowed",
}


#: Deepest nesting of YAML collections read (flow brackets plus block levels). libyaml and
#: PyYAML recurse once per level: 30,000 nested lists in 60 KB crash the interpreter, so
#: the depth is measured on the text before PyYAML sees it.
MAX_NESTING = 64


def check_nesting(source: str) -> None:
    """FrontmatterError when ``source`` nests collections deeper than :data:`MAX_NESTING`.

    Conservative (docs/skill-format.md#reading): brackets outside quotes and comments
    count, and each block level (deeper indentation, or a ``- ``/``? `` on the same line)
    counts one, so it may over-count, never under-count. Linear in the text's length. A
    text with fewer brackets, lines, ``-`` and ``?`` in all than the limit cannot nest
    deeper than it, and is not walked.
    """
    if (source.count("[") + source.count("{") + source.count("\n") + 1
            + source.count("-") + source.count("?") <= MAX_NESTING):
        return
    flow = 0
    quote = ""
    stack: list[int] = []  # indentation of the open block levels
    for line in source.split("\n"):
        if not quote and flow == 0:
            body = line.lstrip(" ")
            if body and body[0] != "#":
                indent = len(line) - len(body)
                while stack and stack[-1] >= indent:
                    stack.pop()
                stack.append(indent)
                compact = 0
                while body[:2] in ("- ", "? ") or body in ("-", "?"):
                    compact += 1
                    body = body[2:].lstrip(" ")
                if len(stack) + compact > MAX_NESTING:
                    raise _too_deep()
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t"):
                break
            elif c in "[{":
                flow += 1
                if flow + len(stack) > MAX_NESTING:
                    raise _too_deep()
            elif c in "]}" and flow:
                flow -= 1
            i += 1


def _too_deep() -> FrontmatterError:
    return FrontmatterError(f"frontmatter nests lists or mappings more than {MAX_NESTING} "
                            "levels deep (the nesting limit); it was not read")


def decode(data: bytes) -> str:
    """Decode SKILL.md bytes: UTF-8, BOM stripped, line endings normalised."""
    if len(data) > MAX_FILE_BYTES:
        raise FrontmatterError(f"SKILL.md is over the {MAX_FILE_BYTES // 1024} KiB limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrontmatterError(f"SKILL.md is not valid UTF-8 (byte {exc.start})") from None
    if text[:1] == "\ufeff":
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def split(text: str) -> tuple[str | None, str]:
    """Return ``(frontmatter_yaml or None, body)`` for decoded text."""
    if not text.startswith("---\n") and text != "---":
        return None, text
    end = text.find("\n---\n", 3)
    if end != -1:
        return text[4:end + 1], text[end + 5:]
    if text.endswith("\n---"):
        return text[4:len(text) - 3], ""
    raise FrontmatterError("frontmatter starts with '---' but has no closing '---' line")


def parse_document(data: bytes) -> tuple[str, str, dict[str, Any]]:
    """``(text, body, mapping)`` of SKILL.md bytes: :func:`decode`, :func:`split` and
    :func:`parse_yaml` (``{}`` without frontmatter)."""
    text = decode(data)
    source, body = split(text)
    return text, body, parse_yaml(source) if source is not None else {}


def parse_yaml(source: str) -> dict[str, Any]:
    """Parse frontmatter YAML into a mapping, refusing what docs/skill-format.md#reading refuses.

    The limits are checked on the text before PyYAML sees it: the size, then the nesting
    (PyYAML recurses once per level), then anchors, aliases and tags (by PyYAML's own
    scanner, only when the text holds one of ``&*!``).
    """
    if len(source.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        raise FrontmatterError(
            f"frontmatter is over the {MAX_FRONTMATTER_BYTES // 1024} KiB limit"
        )
    check_nesting(source)
    if "&" in source or "*" in source or "!" in source:
        _refuse_anchors_aliases_tags(source)
    try:
        value = yaml.load(source, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"invalid YAML frontmatter: {_yaml_reason(exc)}") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise FrontmatterError(f"invalid YAML frontmatter: {exc}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrontmatterError(
            f"frontmatter must be a YAML mapping, not {_yaml_type(value)}"
        )
    return value


def _refuse_anchors_aliases_tags(source: str) -> None:
    try:
        for token in yaml.scan(source, Loader=_Loader):
            reason = _FORBIDDEN_TOKENS.get(type(token))
            if reason:
                line = token.start_mark.line + 2  # +1 for 1-based, +1 for the '---' line
                raise FrontmatterError(f"invalid YAML frontmatter: {reason} (line {line})")
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"invalid YAML frontmatter: {_yaml_reason(exc)}") from None


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"{problem} (line {mark.line + 2}, column {mark.column + 1})"
    return str(problem)


def _yaml_type(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"
