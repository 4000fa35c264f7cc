"""Discover skills in the roots and build a snapshot (SPEC §3, seed 002).

discovery (immediate children, sorted) → precedence (workspace > user >
bundled) → parse the winner → exclusion rules → eligibility → index. A bad
skill becomes a diagnostic; only a root that cannot be read raises.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

from . import skill as skill_mod
from .commands import BUILTIN_NAMES
from .paths import Root
from .skill import Skill, SkillError
from .snapshot import Diagnostic, Snapshot
from .tools import ToolPolicy, ToolRegistry


class LoaderError(RuntimeError):
    """A skill root that must be read cannot be; loading stops."""


@dataclass(frozen=True)
class Candidate:
    name: str
    root: Root
    path: Path
    error: str | None = None  # why it cannot be a skill; it still takes part in precedence


@dataclass(frozen=True)
class Host:
    """What eligibility is checked against (the real machine by default)."""

    platform: str
    env: Mapping[str, str]
    path: str | None

    @classmethod
    def current(cls) -> "Host":
        return cls(sys.platform, dict(os.environ), os.environ.get("PATH"))


def discover(root: Root, diagnostics: list[Diagnostic]) -> list[Candidate]:
    """Skill candidates among the immediate children of ``root``, sorted by name."""
    path = root.path
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        if root.explicit:
            raise LoaderError(f"{root.source} skill root {path} does not exist") from None
        return []
    except NotADirectoryError:
        raise LoaderError(f"{root.source} skill root {path} is not a directory") from None
    except OSError as exc:
        raise LoaderError(f"{root.source} skill root {path} cannot be read: "
                          f"{exc.strerror or exc}") from None

    real_root = None
    found: list[Candidate] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        try:
            if not entry.is_dir():
                continue
            if entry.is_symlink():
                real_root = real_root or os.path.realpath(path)
                target = os.path.realpath(entry.path)
                if os.path.commonpath([real_root, target]) != real_root or target == real_root:
                    found.append(Candidate(entry.name, root, Path(entry.path),
                                           f"symlink points outside its root ({target}); "
                                           "not followed"))
                    continue
            if not os.path.isfile(os.path.join(entry.path, "SKILL.md")):
                found.append(Candidate(entry.name, root, Path(entry.path), "SKILL.md is missing"))
                continue
        except OSError as exc:
            found.append(Candidate(entry.name, root, Path(entry.path),
                                   f"cannot be read: {exc.strerror or exc}"))
            continue
        found.append(Candidate(entry.name, root, Path(entry.path)))
    return found


def build_snapshot(roots: Iterable[Root], tools: ToolRegistry, policy: ToolPolicy,
                   version: int = 1, host: Host | None = None) -> Snapshot:
    """Run the whole load and return an immutable :class:`Snapshot`."""
    roots = tuple(roots)
    host = host or Host.current()
    diagnostics: list[Diagnostic] = []

    by_name: dict[str, list[Candidate]] = {}
    reals = [os.path.realpath(r.path) for r in roots]
    for i, root in enumerate(roots):
        same = next((later for later, real in zip(roots[i + 1:], reals[i + 1:])
                     if real == reals[i]), None)
        if same is not None and os.path.isdir(reals[i]):
            diagnostics.append(Diagnostic(
                "note", None, root.source, str(root.path),
                f"the {root.source} root is the same folder as the {same.source} root; "
                f"its skills are read once, as {same.source} skills"))
            continue
        for cand in discover(root, diagnostics):
            by_name.setdefault(cand.name, []).append(cand)

    included: list[Skill] = []
    which = _WhichCache(host.path)
    for name in sorted(by_name):
        winner, *shadowed = by_name[name]  # roots are in precedence order
        for loser in shadowed:
            diagnostics.append(Diagnostic(
                "shadowed", name, loser.root.source, str(loser.path),
                f"shadowed by the {winner.root.source} copy at {winner.path}"))
        skill = _load_one(winner, diagnostics)
        if skill is None:
            continue
        reason = _exclusion(skill, tools, policy)
        if reason:
            diagnostics.append(Diagnostic("skill_error", name, skill.source, skill.path, reason))
            continue
        reason = _ineligibility(skill, tools, policy, host, which)
        if reason:
            diagnostics.append(Diagnostic("ineligible", name, skill.source, skill.path, reason))
            continue
        if skill.unknown_keys:
            diagnostics.append(Diagnostic(
                "note", name, skill.source, skill.path,
                f"unknown frontmatter key(s) ignored: {', '.join(skill.unknown_keys)}"))
        included.append(skill)

    aliases, clashes = _aliases(included, diagnostics)
    return Snapshot(
        version=version,
        hash=_content_hash(included),
        skills=tuple(included),
        diagnostics=tuple(diagnostics),
        roots=roots,
        aliases=MappingProxyType(aliases),
        alias_clashes=MappingProxyType(clashes),
    )


def _load_one(cand: Candidate, diagnostics: list[Diagnostic]) -> Skill | None:
    source, path = cand.root.source, str(cand.path)
    if cand.error:  # a malformed winner is excluded; no fallback to a shadowed copy
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, cand.error))
        return None
    skill_md = os.path.join(path, "SKILL.md")
    try:
        if os.path.islink(skill_md):
            real_dir = os.path.realpath(path)
            target = os.path.realpath(skill_md)
            if os.path.commonpath([real_dir, target]) != real_dir:
                raise SkillError(f"SKILL.md is a symlink to {target}, outside the skill folder")
        with open(skill_md, "rb") as fh:
            data = fh.read(skill_mod.frontmatter.MAX_FILE_BYTES + 1)
        return skill_mod.parse(cand.name, source, path, data)
    except SkillError as exc:
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, str(exc)))
    except OSError as exc:
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path,
                                      f"SKILL.md cannot be read: {exc.strerror or exc}"))
    return None


def _exclusion(skill: Skill, tools: ToolRegistry, policy: ToolPolicy) -> str | None:
    """Malformed-by-context rules: built-in collision, unknown command_tool."""
    if skill.command and skill.command in BUILTIN_NAMES:
        return (f"'command' /{skill.command} collides with the built-in command "
                f"/{skill.command}; built-ins win")
    if skill.command_tool and skill.command_tool not in tools:
        return f"'command_tool' names '{skill.command_tool}', which is not a registered tool"
    return None


def _ineligibility(skill: Skill, tools: ToolRegistry, policy: ToolPolicy,
                   host: Host, which: "_WhichCache") -> str | None:
    problems: list[str] = []
    elig = skill.eligibility
    if elig.os is not None and host.platform not in elig.os:
        problems.append(f"requires OS {' or '.join(elig.os)}; this is {host.platform}")
    missing_env = [v for v in elig.env if not host.env.get(v)]
    if missing_env:
        problems.append(f"requires environment variable(s) {', '.join(missing_env)} (unset or empty)")
    missing_bin = [b for b in elig.binaries if not which(b)]
    if missing_bin:
        problems.append(f"requires binar{'y' if len(missing_bin) == 1 else 'ies'} "
                        f"{', '.join(missing_bin)} on PATH (not found)")
    if skill.command_tool:
        reason = policy.unavailable_reason(tools, skill.command_tool)
        if reason:
            problems.append(f"its command_tool is unavailable: {reason}")
    for tool in skill.requires_tools:
        reason = policy.unavailable_reason(tools, tool)
        if reason:
            problems.append(f"requires tool '{tool}': {reason}")
    return "; ".join(problems) or None


def _aliases(skills: list[Skill], diagnostics: list[Diagnostic]) -> tuple[dict, dict]:
    claims: dict[str, list[str]] = {}
    for s in skills:
        if s.command:
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


def _content_hash(skills: list[Skill]) -> str:
    h = hashlib.sha256()
    for s in skills:
        h.update(s.name.encode())
        h.update(b"\0" + s.source.encode() + b"\0")
        h.update(s.text.encode("utf-8", "surrogatepass"))
        h.update(b"\0\0")
    return h.hexdigest()


class _WhichCache:
    def __init__(self, path: str | None) -> None:
        self._path = path
        self._seen: dict[str, bool] = {}

    def __call__(self, binary: str) -> bool:
        if binary not in self._seen:
            self._seen[binary] = shutil.which(binary, path=self._path) is not None
        return self._seen[binary]
