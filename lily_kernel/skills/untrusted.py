"""The skills of an untrusted workspace's own folders: listed, not loaded
(docs/trust-boundary.md#workspace-trust).

The loader is given the sources of those roots (:class:`Untrusted`); each skill folder in
them becomes one ``untrusted`` diagnostic (:func:`listing`) saying what it is, what it
would take from the loaded skills, and why it is not loaded. Reading one parses its
``SKILL.md`` with the loader's own reader and parser; nothing of it is offered or bound.
"""
from __future__ import annotations

from dataclasses import dataclass

from lily_kernel.errors import SkillError
from lily_kernel.skills.aliases import alias_key, builtin_lookalike
from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import Skill, parse
from lily_kernel.skills.skill_md import Unreadable as _Unreadable
from lily_kernel.skills.skill_md import read as _read
from lily_kernel.skills.snapshot import Diagnostic


@dataclass(frozen=True)
class Untrusted:
    """The roots whose skills are listed but not loaded (an untrusted workspace's own
    folders: docs/trust-boundary.md#workspace-trust), and why, in a few words."""
    sources: frozenset[str]
    why: str


def listing(root: Root, name: str, path: str, error: str | None, why: str,
            loaded: dict[str, Skill], aliases: dict[str, str],
            reserved: frozenset[str]) -> Diagnostic:
    """The ``untrusted`` diagnostic of a skill folder of an untrusted root: why it is not
    loaded, what it says it does, and what it would take from the loaded skills."""
    parts = []
    data = None if error else _read(path)
    skill = None
    if error or isinstance(data, _Unreadable):
        parts.append(f"(it could not be read: {error or getattr(data, 'reason', '')})")
    else:
        assert data is not None
        try:
            skill = parse(name, root.source, path, data[0])  # (the bytes; data[1]: its stat)
        except SkillError as exc:
            parts.append(f"(it is malformed: {exc})")
    if skill is not None:
        parts.append(skill.summary or "(no summary)")
        if skill.command_tool:
            parts.append(f"{skill.invocation_mode} of the tool {skill.command_tool}")
        if skill.command:
            builtin = builtin_lookalike(skill.command, reserved)
            owner = next((o for a, o in aliases.items()
                          if alias_key(a) == alias_key(skill.command)), None)
            if builtin:
                parts.append(f"alias /{skill.command}: conflicts with the built-in /{builtin}")
            elif owner is not None:
                parts.append(f"alias /{skill.command}: conflicts with the "
                             f"{loaded[owner].source} skill {owner}'s /{loaded[owner].command}")
            else:
                parts.append(f"alias /{skill.command}")
    if name in loaded:
        parts.append(f"would shadow the {loaded[name].source} skill {name}")
    parts.append(f"not loaded: {why} (/trust reviews it)")
    return Diagnostic("untrusted", name, root.source, path, "; ".join(parts))
