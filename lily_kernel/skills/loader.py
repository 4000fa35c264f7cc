"""Discover skills in the roots and build a snapshot (docs/loader.md).

discovery (immediate children, sorted) → precedence (workspace > user >
bundled) → parse the winner → exclusion rules → eligibility → index. A bad
skill becomes a diagnostic; only a root that cannot be read raises.
"""
from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lily_kernel.errors import LoaderError, SkillError
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.eligibility import ToolReasons as _ToolReasons
from lily_kernel.skills.eligibility import WhichCache as _WhichCache
from lily_kernel.skills.eligibility import ineligibility as _ineligibility
from lily_kernel.skills.eligibility import notes as _notes
from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import (
    _ANY_ELIGIBILITY,
    MAX_DESCRIPTION,
    Eligibility,
    Skill,
    all_names_valid,
    parse,
    parse_named,
)
from lily_kernel.skills.skill_md import Unreadable as _Unreadable
from lily_kernel.skills.skill_md import read as _read
from lily_kernel.skills.snapshot import Diagnostic, Snapshot

if TYPE_CHECKING:  # passed in by the session
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry


@dataclass(frozen=True)
class Candidate:
    """One skill folder found in a root, before it is read."""
    name: str
    root: Root
    path: Path
    error: str | None = None  # why it cannot be a skill; it still takes part in precedence


def discover(root: Root, diagnostics: list[Diagnostic]) -> list[Candidate]:
    """Skill candidates among the immediate children of ``root``, sorted by name."""
    return [Candidate(name, root, Path(path), error)
            for name, path, error in sorted(_scan(root))]


def _scan(root: Root) -> list[tuple[str, str, str | None]]:
    """:func:`discover`'s candidates as ``(name, path, error)``, in listing order.

    ``path`` is the skill folder as ``str(Path(...))`` would spell it. Listing the
    root is the only system call for a real folder: whether its SKILL.md is there,
    a file, or a symlink is found when it is read (:func:`lily_kernel.skills.skill_md.read`), so a shadowed copy
    costs nothing more. A folder that cannot be a skill carries its ``error``: it
    still takes part in precedence.
    """
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

    # str(Path(entry.path)) for every entry: pathlib normalises the root part once.
    prefix = str(Path(path, "x"))[:-1]
    real_root = None
    found: list[tuple[str, str, str | None]] = []
    for entry in entries:
        name = entry.name
        if name[0] == ".":
            continue
        cand_path = prefix + name
        try:
            if not entry.is_dir():
                continue
            if entry.is_symlink():
                real_root = real_root or os.path.realpath(path)
                target = os.path.realpath(entry.path)
                if os.path.commonpath([real_root, target]) != real_root or target == real_root:
                    found.append((name, cand_path,
                                  f"symlink points outside its root ({target}); not followed"))
                    continue
        except OSError as exc:
            found.append((name, cand_path, f"cannot be read: {exc.strerror or exc}"))
            continue
        found.append((name, cand_path, None))
    return found


def build_snapshot(roots: Iterable[Root], tools: ToolRegistry, policy: ToolPolicy,
                   version: int = 1, host: Host | None = None, *,
                   reserved: frozenset[str] = frozenset()) -> Snapshot:
    """Run the whole load and return an immutable :class:`Snapshot`.

    ``reserved``: the built-in command names, which no skill's ``command`` alias may take
    (the session passes the ones it was given, docs/loader.md#exclusion)."""
    if not gc.isenabled():
        return _build(tuple(roots), tools, policy, version, host, reserved, False)
    gc.disable()
    try:
        return _build(tuple(roots), tools, policy, version, host, reserved, True)
    finally:
        gc.enable()


# A load makes about a dozen long-lived container objects per skill and frees almost
# nothing. Left to itself the collector walks them in young-generation passes, and
# also in full passes over every object in the process, more of them the bigger the
# load; those find nothing and, at 10,000 skills, cost more than the parsing. So the
# automatic collector is paused during a load, which runs the young passes itself
# every _GC_EVERY skills, while the new objects are still in the CPU caches. They end
# up in the oldest generation, as they would have, and the load pays for the passes
# rather than leaving them to whatever its caller allocates next.
_GC_EVERY = 128


def _build(roots: tuple[Root, ...], tools: ToolRegistry, policy: ToolPolicy,
           version: int, host: Host | None, reserved: frozenset[str],
           collect: bool) -> Snapshot:
    host = host or Host.current()
    diagnostics: list[Diagnostic] = []

    # name -> (root, path, error) of the highest-precedence copy; the rest are shadowed.
    winners: dict[str, tuple[Root, str, str | None]] = {}
    shadowed: dict[str, list[tuple[Root, str]]] = {}
    reals = [os.path.realpath(r.path) for r in roots]
    for i, root in enumerate(roots):
        same = next((later for later, real in zip(roots[i + 1:], reals[i + 1:], strict=True)
                     if real == reals[i]), None)
        if same is not None and os.path.isdir(reals[i]):
            diagnostics.append(Diagnostic(
                "note", None, root.source, str(root.path),
                f"the {root.source} root is the same folder as the {same.source} root; "
                f"its skills are read once, as {same.source} skills"))
            continue
        for name, path, error in _scan(root):  # (sorted below, by name)
            if name in winners:
                shadowed.setdefault(name, []).append((root, path))
            else:
                winners[name] = (root, path, error)

    # Every winner's SKILL.md is read first and parsed after: run back to back, the
    # system calls and the parsing each keep the CPU caches the other would evict.
    order = sorted(winners)
    parse_data = parse_named if all_names_valid(order) else parse  # (else each is checked)
    contents = [_read(w[1]) if w[2] is None else None
                for w in map(winners.__getitem__, order)]

    included: list[Skill] = []
    excluded_aliases: dict[str, str] = {}
    append = included.append
    which = _WhichCache(host.path)
    tool_reasons = _ToolReasons(tools, policy)
    countdown = _GC_EVERY
    passed: dict[tuple[int, tuple[str, ...]], Eligibility] = {}
    content = hashlib.sha256()
    digest = content.update
    for name, data in zip(order, contents, strict=True):
        if collect:
            countdown -= 1
            if not countdown:
                gc.collect(1)
                countdown = _GC_EVERY
        root, path, error = winners[name]
        source = root.source
        if shadowed:
            for loser, loser_path in shadowed.get(name, ()):
                diagnostics.append(Diagnostic(
                    "shadowed", name, loser.source, loser_path,
                    f"shadowed by the {source} copy at {path}"))
        if error:  # a malformed winner is excluded; no fallback to a shadowed copy
            diagnostics.append(Diagnostic("skill_error", name, source, path, error))
            continue
        if isinstance(data, _Unreadable):
            diagnostics.append(Diagnostic("skill_error", name, source, path, data.reason))
            continue
        assert data is not None  # read whenever discovery found no error
        try:
            skill = parse_data(name, source, path, data)
        except SkillError as exc:
            diagnostics.append(Diagnostic("skill_error", name, source, path, str(exc)))
            continue
        if skill.command or skill.command_tool:
            reason = _exclusion(skill, tools, reserved)
            if reason:
                diagnostics.append(Diagnostic("skill_error", name, source, path, reason))
                continue
        elig = skill.eligibility
        plain = not skill.command_tool and skill.openclaw is None  # only elig and tools
        if not plain or skill.requires_tools or elig is not _ANY_ELIGIBILITY:
            # A plain rule that passed passes again: the same (shared) Eligibility and tools.
            # (It is kept in ``passed``, so its id stays its own.)
            rule = (id(elig), skill.requires_tools)
            if not plain or passed.get(rule) is not elig:
                reason = _ineligibility(skill, tools, policy, host, which, tool_reasons)
                if reason:
                    diagnostics.append(Diagnostic("ineligible", name, source, path, reason))
                    if skill.command:
                        excluded_aliases.setdefault(skill.command, name)
                    continue
                if plain:
                    passed[rule] = elig
        if skill.unknown_keys or not skill.summary or len(skill.description) > MAX_DESCRIPTION:
            for note in _notes(skill):
                diagnostics.append(Diagnostic("note", name, source, path, note))
        append(skill)
        # The content hash (_hashed, inlined), while the text is still in the CPU caches.
        digest(f"{name}\0{source}\0{skill.text}\0\0".encode("utf-8", "surrogatepass"))

    aliases, clashes = _aliases(included, diagnostics)
    snapshot = Snapshot(
        version=version,
        hash=content.hexdigest(),
        skills=tuple(included),
        diagnostics=tuple(diagnostics),
        roots=roots,
        aliases=MappingProxyType(aliases),
        alias_clashes=MappingProxyType(clashes),
        excluded_aliases=MappingProxyType({a: n for a, n in excluded_aliases.items()
                                           if a not in aliases and a not in clashes}),
    )
    if collect:
        gc.collect(1)
    return snapshot


def check_one(cand: Candidate, tools: ToolRegistry, policy: ToolPolicy,
              host: Host | None = None, *, reserved: frozenset[str] = frozenset(),
              ) -> tuple[Skill | None, list[Diagnostic]]:
    """What a load would make of ``cand`` alone: the skill (None if excluded) and its
    diagnostics, with the loader's own reasons (``lily skills validate --lily``);
    ``reserved`` as for :func:`build_snapshot`."""
    host = host or Host.current()
    diagnostics: list[Diagnostic] = []
    skill = _load_one(cand, diagnostics)
    if skill is None:
        return None, diagnostics
    where = (cand.name, skill.source, skill.path)
    reason = _exclusion(skill, tools, reserved) if skill.command or skill.command_tool else None
    kind = "skill_error"
    if not reason:
        kind = "ineligible"
        reason = _ineligibility(skill, tools, policy, host, _WhichCache(host.path))
    if reason:
        return None, [*diagnostics, Diagnostic(kind, *where, reason)]
    return skill, diagnostics + [Diagnostic("note", *where, n) for n in _notes(skill)]


def _load_one(cand: Candidate, diagnostics: list[Diagnostic]) -> Skill | None:
    """Read and parse one candidate (as :func:`build_snapshot` does each winner)."""
    source, path = cand.root.source, str(cand.path)
    if cand.error:  # a malformed winner is excluded; no fallback to a shadowed copy
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, cand.error))
        return None
    data = _read(path)
    if isinstance(data, _Unreadable):
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, data.reason))
        return None
    try:
        return parse(cand.name, source, path, data)
    except SkillError as exc:
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, str(exc)))
    return None


def _exclusion(skill: Skill, tools: ToolRegistry, reserved: frozenset[str]) -> str | None:
    """Malformed-by-context rules: built-in collision, unknown command_tool."""
    if skill.command and skill.command in reserved:
        return (f"'command' /{skill.command} collides with the built-in command "
                f"/{skill.command}; built-ins win")
    if skill.command_tool and skill.command_tool not in tools:
        return f"'command_tool' names '{skill.command_tool}', which is not a registered tool"
    return None


def _aliases(skills: list[Skill], diagnostics: list[Diagnostic]) -> tuple[dict[str, Any], dict[str, Any]]:
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


def _content_hash(skills: Iterable[Skill]) -> str:
    """The snapshot's hash of ``skills`` (the load computes it as it goes, the same way)."""
    digest = hashlib.sha256()
    for s in skills:
        digest.update(_hashed(s))
    return digest.hexdigest()


def _hashed(s: Skill) -> bytes:
    """What the content hash reads of one included skill: name NUL source NUL text NUL NUL.
    (The load spells it inline; tests/skills/test_snapshot_pin.py holds both to one hash.)"""
    return f"{s.name}\0{s.source}\0{s.text}\0\0".encode("utf-8", "surrogatepass")
