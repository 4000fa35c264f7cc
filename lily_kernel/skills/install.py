"""``lily skills install`` and ``lily skills remove`` (docs/skills-compat.md#installing-skills).

A source — a local folder, a ``.zip`` / ``.tar.gz`` file, or ``git:URL[@ref][#subdir]``
(cloned with the user's own git) — is unpacked into a private temporary folder,
scanned (:mod:`lily_kernel.skills.install_scan`) and checked as the loader would
(``lily skills validate --lily``), then moved into the chosen root in one rename.
Nothing in the skill is run, and a refused install leaves the root as it was.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lily_kernel.errors import FrontmatterError, InstallError
from lily_kernel.skills.install_scan import MAX_TOTAL_BYTES, Finding, scan
from lily_kernel.skills.paths import skill_roots
from lily_kernel.skills.skill import name_problem

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")
TARGETS = ("user", "workspace")  # the roots Lily installs into: its own


@dataclass(frozen=True)
class Installed:
    """What an install did: the skill's name, where it went, and the findings allowed."""

    name: str
    path: Path
    allowed: tuple[Finding, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())


def target_root(target: str, env: Mapping[str, str] | None = None) -> Path:
    """The folder of Lily's ``user`` or ``workspace`` root, as the loader would read it."""
    if target not in TARGETS:
        raise InstallError(f"skills install into the user or workspace root, not '{target}'")
    return next(r.path for r in skill_roots(env) if r.source == target)


LilyCheck = Callable[[Path], "list[tuple[str, str]]"]


def install(source: str, check: LilyCheck, target: str = "user", name: str | None = None,
            sha256: str | None = None, allow_risky: bool = False,
            env: Mapping[str, str] | None = None) -> Installed:
    """Install the skill at ``source`` into the ``target`` root; raises InstallError.

    ``check`` is ``lily skills validate --lily`` for one folder: ``(kind, reason)`` pairs
    (the caller brings the tool registry and policy it needs).
    """
    root = target_root(target, env)
    with tempfile.TemporaryDirectory(prefix="lily-install-") as tmp:
        skill_dir = _fetch(source, Path(tmp), sha256)
        final = name or _declared_name(skill_dir) or _source_name(source, skill_dir, Path(tmp))
        problem = name_problem(final)
        if problem:
            raise InstallError(f"cannot install as {final!r}: {problem}")
        staged = Path(tmp) / "staged" / final
        shutil.copytree(skill_dir, staged, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        findings = scan(staged)
        notes: list[str] = []
        for kind, reason in check(staged):
            if kind == "skill_error":
                findings.append(Finding("SKILL.md", None, f"fails `lily skills validate "
                                        f"--lily`: {reason}"))
            else:
                notes.append(f"{kind}: {reason}")
        hard = [f for f in findings if f.hard]
        if hard or (findings and not allow_risky):
            shown = "; ".join(map(str, findings))
            hint = "" if hard else " (--allow-risky installs it anyway)"
            raise InstallError(f"refused to install '{final}': {shown}{hint}", tuple(findings))
        destination = root / final
        if os.path.lexists(destination):
            raise InstallError(f"a skill named '{final}' is already in the {target} root "
                               f"({destination}); remove it first with `lily skills remove "
                               f"{final}`")
        root.mkdir(parents=True, exist_ok=True)
        landing = Path(tempfile.mkdtemp(prefix=f".{final}.installing-", dir=root))
        try:
            shutil.copytree(staged, landing / final, symlinks=True)
            os.rename(landing / final, destination)  # one step: the loader sees all or nothing
        finally:
            shutil.rmtree(landing, ignore_errors=True)
    return Installed(final, destination, tuple(findings), tuple(notes))


def remove(name: str, target: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Delete the installed skill ``name`` from Lily's user or workspace root (the one that
    holds it; ``target`` says which when both do). Returns the folder removed."""
    problem = name_problem(name)
    if problem:
        raise InstallError(problem)
    targets = (target,) if target else TARGETS
    found = [(t, target_root(t, env) / name) for t in targets
             if os.path.lexists(target_root(t, env) / name)]
    if not found:
        where = f"the {target} root" if target else "the user or workspace root"
        raise InstallError(f"no skill named '{name}' in {where}")
    if len(found) > 1:
        raise InstallError(f"'{name}' is in both the user and the workspace root; say which "
                           "with --user or --workspace")
    _, path = found[0]
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)
    return path


# -- sources ------------------------------------------------------------------------------

def _fetch(source: str, tmp: Path, sha256: str | None) -> Path:
    """The skill folder ``source`` names, unpacked under ``tmp`` when it is not a folder."""
    if source.startswith("git:"):
        if sha256:
            raise InstallError("--sha256 pins an archive; a git source is pinned by its @ref")
        return _git(source[4:], tmp)
    path = Path(source).expanduser()
    if path.is_dir():
        if sha256:
            raise InstallError("--sha256 pins an archive file, not a folder")
        return _skill_folder(path, source)
    if not path.is_file():
        raise InstallError(f"no such skill folder or archive: {source}")
    data = path.read_bytes()
    if sha256:
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256.strip().lower():
            raise InstallError(f"{path.name} has SHA-256 {digest}, not the {sha256} given "
                               "with --sha256; nothing was installed")
    unpacked = tmp / "unpacked"
    unpacked.mkdir()
    lower = path.name.lower()
    if lower.endswith(".zip"):
        _unzip(path, unpacked)
    elif lower.endswith((".tar.gz", ".tgz")):
        _untar(path, unpacked)
    else:
        raise InstallError(f"{path.name} is not a .zip or .tar.gz archive")
    return _skill_folder(unpacked, source)


def _source_name(source: str, skill_dir: Path, tmp: Path) -> str:
    """The name a skill without a declared ``name`` gets: its folder's, unless that folder
    is Lily's own unpacking or clone folder; then the archive's or repository's name."""
    if not skill_dir.is_relative_to(tmp) or skill_dir.parent != tmp:
        return skill_dir.name
    base = source.split("#")[0].rstrip("/")
    if source.startswith("git:"):
        at = base.rfind("@")
        base = base[:at] if at > base.rfind("/") else base
        base = base.removesuffix(".git")
    stem = os.path.basename(base)
    for suffix in ARCHIVE_SUFFIXES:
        if stem.lower().endswith(suffix):
            return stem[:-len(suffix)]
    return stem


def _skill_folder(path: Path, source: str) -> Path:
    """``path`` when it holds SKILL.md, else its one subfolder that does."""
    if (path / "SKILL.md").is_file():
        return path
    inner = [p for p in sorted(path.iterdir()) if p.is_dir() and (p / "SKILL.md").is_file()]
    if len(inner) == 1:
        return inner[0]
    raise InstallError(f"{source} holds no skill: no SKILL.md at its top or in a single "
                       "folder inside it")


def _unsafe_member(name: str) -> str | None:
    """Why an archive member's name may not be unpacked (path traversal), or None."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
        return f"'{name}' would be written outside the skill (path traversal)"
    return None


def _vet(path: Path, members: list[tuple[str | None, int]]) -> None:
    """Refuse the archive ``path`` for its first unsafe member, or for its unpacked size."""
    for problem, _ in members:
        if problem:
            raise InstallError(f"refused {path.name}: {problem}; nothing was installed")
    total = sum(size for _, size in members)
    if total > MAX_TOTAL_BYTES:
        raise InstallError(f"refused {path.name}: it unpacks to {total:,} bytes; the cap "
                           f"is {MAX_TOTAL_BYTES:,}")


def _zip_problem(info: zipfile.ZipInfo) -> str | None:
    if info.flag_bits & 0x1:
        return f"'{info.filename}' is encrypted (a password-protected archive)"
    if stat.S_ISLNK(info.external_attr >> 16):
        return f"'{info.filename}' is a symlink inside the archive"
    return _unsafe_member(info.filename)


def _tar_problem(member: tarfile.TarInfo) -> str | None:
    if member.issym() or member.islnk():
        link = PurePosixPath(member.name).parent / member.linkname
        if member.linkname.startswith("/") or _unsafe_member(str(link)):
            return f"'{member.name}' links outside the skill (to {member.linkname})"
    elif not (member.isfile() or member.isdir()):
        return f"'{member.name}' is not a regular file or folder"
    return _unsafe_member(member.name)


def _unzip(path: Path, out: Path) -> None:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InstallError(f"{path.name} is not a readable zip archive: {exc}") from None
    with archive:
        _vet(path, [(_zip_problem(info), info.file_size) for info in archive.infolist()])
        for info in archive.infolist():
            target = out.joinpath(*PurePosixPath(info.filename.replace("\\", "/")).parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)  # regular files only, no modes: nothing executable


def _untar(path: Path, out: Path) -> None:
    try:
        with tarfile.open(path, "r:gz") as archive:
            members = archive.getmembers()
            _vet(path, [(_tar_problem(m), m.size) for m in members])
            if hasattr(tarfile, "data_filter"):  # Python's own 'data' filter (3.11.4+)
                archive.extractall(out, members=members, filter="data")
            else:  # pragma: no cover - older 3.11: the members were vetted above
                archive.extractall(out, members=members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise InstallError(f"{path.name} is not a readable .tar.gz archive: {exc}") from None


def _git(spec: str, tmp: Path) -> Path:
    """``URL[@ref][#subdir]`` cloned with the user's git: no hooks, no submodules, no prompt."""
    spec, _, subdir = spec.partition("#")
    url, ref = spec, ""
    at = spec.rfind("@")
    if at > spec.rfind("/") and at > 0 and not spec[:at].endswith(":"):
        url, ref = spec[:at], spec[at + 1:]
    if not url or url.startswith("-") or ref.startswith("-"):
        raise InstallError(f"not a git source: git:{spec}")
    clone = tmp / "clone"
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    base = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.symlinks=true"]
    steps = [[*base, "clone", "--quiet", "--no-checkout", "--", url, str(clone)],
             [*base, "-C", str(clone), "checkout", "--quiet", ref or "HEAD", "--"]]
    for cmd in steps:
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                                  check=False)
        except FileNotFoundError:
            raise InstallError("git is not installed; a git: source needs it") from None
        if done.returncode:
            raise InstallError(f"git failed for git:{spec}: "
                               f"{done.stderr.strip().splitlines()[-1:] or done.returncode}")
    folder = clone
    if subdir:
        problem = _unsafe_member(subdir)
        if problem:
            raise InstallError(f"#{subdir}: {problem}")
        folder = clone / subdir
    return _skill_folder(folder, f"git:{spec}" + (f"#{subdir}" if subdir else ""))


# -- checks ---------------------------------------------------------------------------------

def _declared_name(folder: Path) -> str | None:
    """The ``name`` SKILL.md declares, if it reads as a string."""
    from lily_kernel.skills import frontmatter
    try:
        text = frontmatter.decode((folder / "SKILL.md").read_bytes())
        source, _ = frontmatter.split(text)
        meta = frontmatter.parse_yaml(source) if source is not None else {}
    except (FrontmatterError, OSError):
        return None
    name = meta.get("name")
    return name if isinstance(name, str) else None
