"""Discover skills in the roots and build a snapshot (docs/loader.md).

discovery (immediate children, sorted) → precedence (workspace > user >
bundled) → parse the winner → exclusion rules → eligibility → index. A bad
skill becomes a diagnostic; only a root that cannot be read raises.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from lily_kernel.errors import LoaderError, SkillError
from lily_kernel.skills import remote as _remote
from lily_kernel.skills import skill_md
from lily_kernel.skills.aliases import bind as _aliases
from lily_kernel.skills.aliases import builtin_lookalike
from lily_kernel.skills.eligibility import Host, asks_path
from lily_kernel.skills.eligibility import ToolReasons as _ToolReasons
from lily_kernel.skills.eligibility import WhichCache as _WhichCache
from lily_kernel.skills.eligibility import ineligibility as _ineligibility
from lily_kernel.skills.eligibility import notes as _notes
from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import MAX_DESCRIPTION, Skill, parse
from lily_kernel.skills.snapshot import Diagnostic, Snapshot
from lily_kernel.skills.untrusted import Untrusted
from lily_kernel.skills.untrusted import listing as _untrusted

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

    ``path`` is the skill folder as ``str(Path(...))`` would spell it. Listing the root is
    the only system call for a real folder: whether its SKILL.md is there is found when it
    is read (:func:`skill_md.read`), so a shadowed copy costs nothing more. A folder that
    cannot be a skill carries its ``error``: it still takes part in precedence."""
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


#: What was read of a file changed this recently is not kept: a second change within the same
#: timestamp tick (2 s on the coarsest file systems, FAT's) would leave its stat as it was.
SETTLED_NS = 2_000_000_000


class SkillCache:
    """What each skill's SKILL.md parsed into (a :class:`Parsed`), kept between loads: a
    session holds one for the kernel's life. An entry is reused while its file's ``lstat``
    still says the same type, device, inode, size, mtime and ctime, so a load reads and
    parses again only what changed (and a symlinked SKILL.md, whose ``lstat`` is the
    link's, every time). A file changed within :data:`SETTLED_NS` of the load is not kept.
    Each load keeps only the entries of the skills it parsed: those of removed or shadowed
    files go. An entry's verdict holds while the load's :class:`Judging` equals the one it
    was decided against."""

    def __init__(self) -> None:
        # skill folder -> (source, lstat signature, what it parsed into)
        self._entries: dict[str, tuple[str, tuple[int, ...], Parsed]] = {}
        self._kept: dict[str, tuple[str, tuple[int, ...], Parsed]] = {}
        self._settled = 0
        self._judging: Judging | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def start(self) -> None:
        """Begin a load: what it does not ask for is dropped at :meth:`finish`."""
        self._kept = {}
        self._settled = time.time_ns() - SETTLED_NS

    def finish(self) -> None:
        """End a load: keep only what it asked for."""
        self._entries, self._kept = self._kept, {}

    def judging(self, now: Judging) -> Judging:
        """``now``, or the previous load's equal :class:`Judging`: the verdicts kept with
        that one still hold."""
        if now != self._judging:
            self._judging = now
        return self._judging

    def parsed(self, name: str, source: str, path: str) -> Parsed:
        """:func:`_parse_one` of the skill folder ``path``, unless it is unchanged."""
        entry = self._entries.get(path)
        if entry is not None and entry[0] == source:
            try:
                st = os.lstat(path + _SKILL_MD)
            except OSError:
                pass
            else:
                if (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode,
                        st.st_dev) == entry[1]:
                    self._kept[path] = entry
                    return entry[2]
        read = skill_md.read(path)
        if isinstance(read, skill_md.Unreadable):
            return Parsed(read.reason)
        data, st = read
        result = _parsed(name, source, path, data)
        if st.st_ctime_ns < self._settled and st.st_mtime_ns < self._settled:
            self._kept[path] = (source, _signature(st), result)
        return result


_SKILL_MD = os.sep + "SKILL.md"


def _signature(st: os.stat_result) -> tuple[int, ...]:
    """What of a SKILL.md's stat an entry is kept for (spelled out in SkillCache.parsed)."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_dev)


def build_snapshot(roots: Iterable[Root], tools: ToolRegistry, policy: ToolPolicy,
                   version: int = 1, host: Host | None = None, *,
                   reserved: frozenset[str] = frozenset(),
                   cache: SkillCache | None = None,
                   untrusted: Untrusted | None = None,
                   remote: Sequence[_remote.RemoteRoot] = ()) -> Snapshot:
    """Run the whole load and return an immutable :class:`Snapshot`.

    ``reserved``: the built-in command names, which no skill's ``command`` alias may take
    (the session passes the ones it was given, docs/loader.md#exclusion). ``cache``: the
    parsed files of earlier loads, reused where unchanged, and updated (none: read all).
    ``untrusted``: roots whose skills are only listed (an ``untrusted`` diagnostic each; no
    part in precedence); once trusted (``.reviewed``) they load, but what can do more.
    ``remote``: the MCP servers' skill roots (``mcp:<server>``), below every folder
    (docs/loader.md#mcp-roots): their entries are parsed from the listed frontmatter."""
    roots = tuple(roots)
    host = host or Host.current()
    diagnostics: list[Diagnostic] = []
    gated: list[tuple[Root, str, str, str | None]] = []  # listed, not loaded

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
        if untrusted is not None and untrusted.reviewed is None \
                and root.source in untrusted.sources:
            gated += [(root, *found) for found in sorted(_scan(root))]
            continue
        for name, path, error in _scan(root):  # (sorted below, by name)
            if name in winners:
                shadowed.setdefault(name, []).append((root, path))
            else:
                winners[name] = (root, path, error)

    listed = _remote_candidates(remote, winners, shadowed, diagnostics, reserved)
    parsed = cache.parsed if cache is not None else _parse_one
    judging = Judging(tools, tools.version, policy, host.platform, dict(host.env), host.path,
                      reserved)
    if cache is not None:
        cache.start()
        judging = cache.judging(judging)
    included: list[Skill] = []
    content = hashlib.sha256()  # the content hash (_content_hash), skill by skill
    excluded_aliases: dict[str, str] = {}
    which = _WhichCache(host.path)
    tool_reasons = _ToolReasons(tools, policy)
    for name in sorted(winners):  # (the names alone sort faster than the items)
        root, path, error = winners[name]
        source = root.source
        if name in shadowed:
            for loser, loser_path in shadowed[name]:
                diagnostics.append(Diagnostic(
                    "shadowed", name, loser.source, loser_path,
                    f"shadowed by the {source} copy at {path}"))
        if error:  # a malformed winner is excluded; no fallback to a shadowed copy
            diagnostics.append(Diagnostic("skill_error", name, source, path, error))
            continue
        entry = _parsed_remote(name, source, path, listed[path]) if path in listed \
            else parsed(name, source, path)
        skill = entry.skill
        if isinstance(skill, str):
            diagnostics.append(Diagnostic("skill_error", name, source, path, skill))
            continue
        if untrusted is not None and source in untrusted.sources:  # trusted once: compare
            if entry.checked is not untrusted.reviewed:  # (kept while the record is)
                entry.checked, entry.held = untrusted.reviewed, untrusted.check(skill)
            if entry.held is not None:
                diagnostics.append(entry.held)
                if entry.held.kind == "untrusted":
                    continue
        if entry.judged is judging:
            verdict = entry.verdict
        else:
            verdict = _verdict(skill, tools, policy, host, reserved, which, tool_reasons)
            if not asks_path(skill):  # a binary may appear on PATH: asked at every load
                entry.judged, entry.verdict = judging, verdict
        if verdict is not None:
            kind, reason = verdict
            diagnostics.append(Diagnostic(kind, name, source, path, reason))
            if kind == "ineligible" and skill.command:
                excluded_aliases.setdefault(skill.command, name)
            continue
        if skill.unknown_keys or not skill.summary or len(skill.description) > MAX_DESCRIPTION:
            for note in _notes(skill):
                diagnostics.append(Diagnostic("note", name, source, path, note))
        included.append(skill)
        content.update(entry.hashed)
    if cache is not None:
        cache.finish()

    aliases, clashes = _aliases(included, diagnostics)
    if gated and untrusted is not None:
        by_name = {s.name: s for s in included}
        for root, name, path, error in gated:
            diagnostics.append(_untrusted(root, name, path, error, untrusted.why, by_name,
                                          aliases, reserved))
    return Snapshot(
        version=version,
        hash=content.hexdigest(),
        skills=tuple(included),
        diagnostics=tuple(diagnostics),
        roots=roots,
        aliases=MappingProxyType(aliases),
        alias_clashes=MappingProxyType(clashes),
        excluded_aliases=MappingProxyType({a: n for a, n in excluded_aliases.items()
                                           if a not in aliases and a not in clashes}),
        held=MappingProxyType({s.path: listed[s.path] for s in included if s.path in listed}),
    )


#: Why a parsed skill is left out, as its diagnostic's kind and reason (``skill_error``:
#: excluded by a rule; ``ineligible``: an eligibility rule is unmet), or None if included.
Verdict = tuple[str, str] | None


@dataclass(frozen=True)
class Judging:
    """What a skill's verdict depends on besides the skill itself and the binaries on PATH:
    the tools (this registry, at this version), the policy, the host's platform, environment
    and PATH, and the reserved command names. Equal judgings give equal verdicts."""
    tools: ToolRegistry  # compared by identity (a registry has no ==), with its version
    tools_version: int
    policy: ToolPolicy
    platform: str
    env: Mapping[str, str]  # a copy: the host's mapping may change in place
    path: str | None
    reserved: frozenset[str]


class Parsed:
    """What one SKILL.md parsed into: the :class:`Skill` and what the content hash reads
    of it (:func:`_hashed`), or why it is malformed or unreadable (and no bytes); the skill's
    last :data:`Verdict` with the :class:`Judging` it was decided against; its trust check."""

    __slots__ = ("checked", "hashed", "held", "judged", "skill", "verdict")

    def __init__(self, skill: Skill | str, hashed: bytes = b"") -> None:
        self.skill, self.hashed = skill, hashed
        self.judged: Judging | None = None
        self.verdict: Verdict = None
        self.checked: object = None  # the trust record's skills it was checked against
        self.held: Diagnostic | None = None  # what that check said (Untrusted.check)


def _parse_one(name: str, source: str, path: str) -> Parsed:
    """The skill in the folder ``path``, or why it is malformed or unreadable."""
    read = skill_md.read(path)
    if isinstance(read, skill_md.Unreadable):
        return Parsed(read.reason)
    return _parsed(name, source, path, read[0])


def _parsed(name: str, source: str, path: str, data: bytes) -> Parsed:
    try:
        skill = parse(name, source, path, data)
    except SkillError as exc:
        return Parsed(str(exc))
    return Parsed(skill, _hashed(skill))


def _remote_candidates(remote: Sequence[_remote.RemoteRoot],
                       winners: dict[str, tuple[Root, str, str | None]],
                       shadowed: dict[str, list[tuple[Root, str]]],
                       diagnostics: list[Diagnostic],
                       reserved: frozenset[str]) -> dict[str, _remote.RemoteSkill]:
    """Put the MCP servers' entries into precedence, after every folder; the entries by
    the path their skill carries (``mcp:<server>:<root uri>``)."""
    listed: dict[str, _remote.RemoteSkill] = {}
    for rroot in remote:
        root = Root(rroot.source, Path(rroot.source), False)
        if rroot.reason:
            diagnostics.append(Diagnostic("note", None, root.source, None,
                                          f"no skills from MCP server '{rroot.server}': "
                                          f"{rroot.reason}"))
        names = [s.name for s in rroot.skills]
        for rskill in sorted(rroot.skills, key=lambda s: (s.name, s.uri)):
            path = f"{root.source}:{rskill.root or rskill.uri}"
            error = rskill.error
            if error is None and names.count(rskill.name) > 1:
                error = (f"MCP server '{rroot.server}' serves more than one skill named "
                         f"'{rskill.name}'; none of them is loaded")
            lookalike = builtin_lookalike(rskill.name, reserved)
            if error is None and lookalike:
                error = (f"its name looks like the built-in command /{lookalike}; a skill "
                         "from an MCP server never takes a built-in's name")
            if rskill.name in winners:
                shadowed.setdefault(rskill.name, []).append((root, path))
                continue
            winners[rskill.name] = (root, path, error and f"{error} (MCP server "
                                                          f"'{rroot.server}', {rskill.uri})")
            listed[path] = rskill
    return listed


def _parsed_remote(name: str, source: str, path: str, rskill: _remote.RemoteSkill) -> Parsed:
    """An MCP skill parsed from its listed frontmatter; the hash reads its manifest too."""
    entry = _parsed(name, source, path, _remote.document(rskill))
    skill = entry.skill
    if isinstance(skill, Skill) and (skill.command_tool or
                                     skill.invocation_mode == "tool_dispatch"):
        return Parsed("a skill from an MCP server cannot dispatch a tool: that would run "
                      "code on this host without the user's approval")
    if isinstance(skill, Skill):
        return Parsed(skill, entry.hashed + rskill.key().encode() + b"\0")
    return entry


def _verdict(skill: Skill, tools: ToolRegistry, policy: ToolPolicy, host: Host,
             reserved: frozenset[str], which: _WhichCache,
             tool_reasons: _ToolReasons | None = None) -> Verdict:
    """Whether a parsed skill is left out: :func:`_exclusion`, then eligibility."""
    if skill.command or skill.command_tool:
        reason = _exclusion(skill, tools, reserved)
        if reason:
            return "skill_error", reason
    reason = _ineligibility(skill, tools, policy, host, which, tool_reasons)
    return ("ineligible", reason) if reason else None


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
    verdict = _verdict(skill, tools, policy, host, reserved, _WhichCache(host.path))
    if verdict is not None:
        return None, [*diagnostics, Diagnostic(verdict[0], *where, verdict[1])]
    return skill, diagnostics + [Diagnostic("note", *where, n) for n in _notes(skill)]


def _load_one(cand: Candidate, diagnostics: list[Diagnostic]) -> Skill | None:
    """Read and parse one candidate (as :func:`build_snapshot` does each winner)."""
    source, path = cand.root.source, str(cand.path)
    if cand.error:  # a malformed winner is excluded; no fallback to a shadowed copy
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, cand.error))
        return None
    skill = _parse_one(cand.name, source, path).skill
    if isinstance(skill, str):
        diagnostics.append(Diagnostic("skill_error", cand.name, source, path, skill))
        return None
    return skill


def _exclusion(skill: Skill, tools: ToolRegistry, reserved: frozenset[str]) -> str | None:
    """Malformed-by-context rules: built-in collision, unknown command_tool."""
    builtin = builtin_lookalike(skill.command, reserved) if skill.command else None
    if builtin is not None and builtin == skill.command:
        return (f"'command' /{skill.command} collides with the built-in command "
                f"/{skill.command}; built-ins win")
    if builtin:
        return (f"'command' /{skill.command} looks like the built-in command /{builtin} "
                "(compared NFKC-normalised and case folded, '-' as '_'); built-ins win")
    if skill.command_tool and skill.command_tool not in tools:
        return f"'command_tool' names '{skill.command_tool}', which is not a registered tool"
    return None


def _content_hash(skills: Iterable[Skill]) -> str:
    """The snapshot's hash of ``skills``: sha256 over :func:`_hashed` of each, in order."""
    digest = hashlib.sha256()
    for s in skills:
        digest.update(_hashed(s))
    return digest.hexdigest()


def _hashed(s: Skill) -> bytes:
    """What the content hash reads of one included skill: name NUL source NUL text NUL NUL."""
    return f"{s.name}\0{s.source}\0{s.text}\0\0".encode("utf-8", "surrogatepass")
