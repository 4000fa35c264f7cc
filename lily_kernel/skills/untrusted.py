"""The skills of a workspace's own folders before and after the user trusts it
(docs/trust-boundary.md#workspace-trust).

Never trusted: the loader is given the sources of those roots (:class:`Untrusted`); each
skill folder in them becomes one ``untrusted`` diagnostic (:func:`listing`) saying what it
is, what it would take from the loaded skills, and why it is not loaded. Reading one parses
its ``SKILL.md`` with the loader's own reader and parser; nothing of it is offered or bound.

Trusted once (:attr:`Untrusted.reviewed`): the skills load, each compared with what it was
when trusted (:func:`review_digest`: what it can do without the model, and its text). One
that can now do something it could not (a ``tool_dispatch``, a ``command_tool``, an alias, a
typed declaration, each changed or new) is held back, an ``untrusted`` diagnostic naming
what it gained (:meth:`Untrusted.check`); one whose text alone changed loads, with a
``note`` saying so (docs/trust-boundary.md#what-asks-again).
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from lily_kernel.errors import SkillError
from lily_kernel.skills.aliases import alias_key, builtin_lookalike
from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import Skill, parse
from lily_kernel.skills.skill_md import Unreadable as _Unreadable
from lily_kernel.skills.skill_md import read as _read
from lily_kernel.skills.snapshot import Diagnostic

#: The capability digest of a skill that only instructs the model: such a skill never needs a
#: review, so a new one loads too (settings/workspace_trust.py spells the same word: the
#: settings sit below the skills and cannot import it).
TEXT_ONLY = "text"
#: The words of an ``untrusted`` diagnostic's reason that mark a skill held back in a trusted
#: workspace (rather than listed because the workspace is not trusted).
HELD = "held back, not loaded: what it can do changed since the workspace was trusted"


def abilities(skill: Skill) -> list[str]:
    """What ``skill`` can do without the model, in words (empty: it only instructs the
    model, whose calls the permission model decides like any prompt's)."""
    out = []
    if skill.invocation_mode == "tool_dispatch" or skill.command_tool:
        out.append(f"{skill.invocation_mode} of the tool {skill.command_tool}")
    if skill.command:
        out.append(f"the alias /{skill.command}")
    if skill.typed is not None:
        out.append(f"a typed {skill.typed.kind} declaration"
                   + (f" ({skill.typed.activity} to the outbox)"
                      if skill.typed.kind == "external" else ""))
    return out


def review_digest(skill: Skill) -> str:
    """``CAPS TEXT``: a digest of what ``skill`` can do without the model (the mode, the
    tool, the alias, the typed declaration but its prose; :data:`TEXT_ONLY` for none), and
    one of its whole text. Both are functions of the file's content alone."""
    caps = TEXT_ONLY
    if abilities(skill):
        typed = skill.typed and replace(skill.typed, purpose="", behaviour="", params=tuple(
            replace(p, description="", line=0) for p in skill.typed.params))
        what = repr((skill.invocation_mode, skill.command_tool, skill.command, typed))
        caps = hashlib.sha256(what.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    # (a shorter text digest: it only says whether to note a change, never what loads)
    text = hashlib.sha256(skill.text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{caps} {text}"


@dataclass(frozen=True)
class Untrusted:
    """The roots whose skills are listed but not loaded (an untrusted workspace's own
    folders: docs/trust-boundary.md#workspace-trust), and why, in a few words; or, once
    the user trusted the workspace, ``reviewed``: each skill as it was then
    (``source/name`` -> :func:`review_digest`), against which each is checked."""
    sources: frozenset[str]
    why: str
    reviewed: Mapping[str, str] | None = field(default=None)

    def check(self, skill: Skill) -> Diagnostic | None:
        """Of a skill of these roots in a trusted workspace: an ``untrusted`` diagnostic when
        it can do more than when trusted (held back: not loaded, no alias bound), a ``note``
        when it is new or its text changed (:func:`review_digest`), else None."""
        was = (self.reviewed or {}).get(f"{skill.source}/{skill.name}")
        digest = review_digest(skill)
        if was == digest:  # as trusted (the common case: one lookup)
            return None
        caps, text = digest.split(" ")
        where = (skill.name, skill.source, skill.path)
        if caps != (was.split(" ")[0] if was else TEXT_ONLY):
            gained = ", ".join(abilities(skill)) or "no way to act without the model"
            return Diagnostic("untrusted", *where, (
                f"{HELD} (now: {gained}); /trust reviews it. {skill.summary}").strip())
        if was is None:
            return Diagnostic("note", *where, "new since the workspace was trusted (its text "
                                              "instructs the model; it loads)")
        if was.split(" ")[1:] != [text]:
            return Diagnostic("note", *where, "its text changed since the workspace was "
                                              "trusted (it instructs the model; it loads)")
        return None


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
