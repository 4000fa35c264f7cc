"""Skill aliases: how two are told apart, which built-in one looks like, and which skill
gets each (docs/loader.md#aliases).

An alias is lower-case ASCII (the skill format's rule); two aliases are still told apart
by a key that folds what a reader would not see (:func:`alias_key`), so a skill cannot
pass for a built-in command, and a workspace skill cannot take an alias the user's or a
bundled skill defines.
"""
from __future__ import annotations

import unicodedata
from typing import Any

from lily_kernel.skills.paths import WORKSPACE_SOURCES
from lily_kernel.skills.remote import is_remote
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.snapshot import Diagnostic


def alias_key(alias: str) -> str:
    r"""An alias as aliases are told apart: NFKC-normalised, case folded, without surrounding
    white space, '-' read as '_' (docs/loader.md#exclusion). Two aliases with one key look
    alike: ``/Confirm``, ``/confirm\n`` and ``/reload-skills`` are the built-ins'."""
    return unicodedata.normalize("NFKC", alias).casefold().strip().replace("-", "_")


def builtin_lookalike(alias: str, reserved: frozenset[str]) -> str | None:
    """The built-in command ``alias`` is or looks like (:func:`alias_key`), or None."""
    if alias in reserved:
        return alias
    key = alias_key(alias)
    return next((r for r in sorted(reserved) if alias_key(r) == key), None)


def bind(skills: list[Skill], diagnostics: list[Diagnostic]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Bind each alias one skill claims. An alias the user's or a bundled skill defines is
    theirs: a workspace skill's alias that is it, or looks like it (:func:`alias_key`), is
    not bound, and a note says so (docs/loader.md#aliases)."""
    own = {alias_key(s.command): s for s in skills
           if s.command and s.source not in WORKSPACE_SOURCES and not is_remote(s.source)}
    folders = {alias_key(s.command): s for s in skills
               if s.command and not is_remote(s.source)}
    claims: dict[str, list[str]] = {}
    for s in skills:
        if not s.command:
            continue
        holder = (folders if is_remote(s.source) else own).get(alias_key(s.command)) \
            if s.source in WORKSPACE_SOURCES or is_remote(s.source) else None
        if holder is not None:
            kind = "an MCP server's skill" if is_remote(s.source) else "a workspace skill"
            diagnostics.append(Diagnostic(
                "note", s.name, s.source, s.path,
                f"alias /{s.command} is not bound: the {holder.source} skill {holder.name} "
                f"defines /{holder.command}, and {kind} cannot take it "
                f"(use /skill {s.name})"))
            continue
        claims.setdefault(s.command, []).append(s.name)
    aliases, clashes = {}, {}
    for alias in sorted(claims):
        owners = claims[alias]
        if len(owners) == 1:
            aliases[alias] = owners[0]
            continue
        clashes[alias] = tuple(owners)
        for owner in owners:
            s = next(x for x in skills if x.name == owner)
            others = ", ".join(o for o in owners if o != owner)
            diagnostics.append(Diagnostic(
                "note", owner, s.source, s.path,
                f"alias /{alias} is also claimed by {others}; the alias is disabled "
                f"(use /skill {owner})"))
    return aliases, clashes
