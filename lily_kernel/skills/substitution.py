"""What a skill's text becomes when it runs: Claude Code's placeholders
(docs/skills-compat.md#claude-code-conventions).

- ``$ARGUMENTS`` is the whole input as typed; ``$ARGUMENTS[N]`` and ``$N`` are
  argument N counted from 0, split shell-style (``"two words"`` is one); past
  the last argument they are empty. ``$1abc`` is not a placeholder (a word
  character follows the digits), as in Claude Code.
- A body with none of them gets the input after it as ``ARGUMENTS: <input>``
  (nothing when the input is empty).
- ``${CLAUDE_SKILL_DIR}`` (Claude Code) and ``{baseDir}`` (OpenClaw) become the
  skill's folder, whoever runs the skill.

Replacement is one pass: text coming from the input is never scanned again.
"""
from __future__ import annotations

import re
import shlex

_ARGUMENTS = re.compile(r"\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS(?!\[\d+\])|\$(\d+)(?!\w)")
_SKILL_DIR = re.compile(r"\$\{CLAUDE_SKILL_DIR\}|\{baseDir\}")


def split_arguments(arguments: str) -> list[str]:
    """The input's arguments, shell-style; an unbalanced quote falls back to plain words."""
    try:
        return shlex.split(arguments)
    except ValueError:
        return arguments.split()


def has_argument_placeholder(body: str) -> bool:
    """Whether ``body`` holds ``$ARGUMENTS``, ``$ARGUMENTS[N]`` or ``$N``."""
    return "$" in body and _ARGUMENTS.search(body) is not None


def substitute_arguments(body: str, arguments: str) -> str:
    """``body`` with every argument placeholder replaced, in one pass."""
    words: list[str] | None = None

    def value(m: re.Match[str]) -> str:
        nonlocal words
        index = m.group(1) or m.group(2)
        if index is None:
            return arguments
        if words is None:
            words = split_arguments(arguments)
        i = int(index)
        return words[i] if i < len(words) else ""
    return _ARGUMENTS.sub(value, body)


def with_arguments(body: str, arguments: str) -> str:
    """A user-run skill's text: placeholders replaced, or ``ARGUMENTS: ...`` appended when
    the body has none and there is input (Claude Code's rule)."""
    if has_argument_placeholder(body):
        return substitute_arguments(body, arguments)
    return f"{body}\n\nARGUMENTS: {arguments}" if arguments else body


def with_skill_dir(text: str, skill_dir: str) -> str:
    """``text`` with ``${CLAUDE_SKILL_DIR}`` and ``{baseDir}`` replaced by the skill's folder."""
    if "{" not in text:
        return text
    return _SKILL_DIR.sub(lambda _m: skill_dir, text)
