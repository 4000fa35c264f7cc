"""Persona: the agent's Markdown files, read explicitly and capped (docs/session.md#persona).

Files are looked up one by one, first hit wins:

1. ``<persona>/agents/<agent>/FILE`` in the workspace persona folder, then in the bundled one
   (only for an agent other than ``default``);
2. ``<persona>/FILE`` in the workspace persona folder, then in the bundled one.

So a workspace ``persona/`` replaces the shipped persona file by file, and a
named agent inherits whatever file it does not define from the default agent. A workspace's
own ``persona/`` is instructions from whoever made the folder: it is used only once the
user trusts the workspace (:func:`usable`, docs/trust-boundary.md#workspace-trust);
``LILY_PERSONA_DIR`` is the user's own choice and always counts.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lily_kernel.errors import PersonaError

PERSONA_FILES = ("SOUL.md", "IDENTITY.md", "USER.md", "AGENTS.md")
DEFAULT_AGENT = "default"
MAX_FILE_CHARS = 16_000


@dataclass(frozen=True)
class PersonaFile:
    """One persona file as loaded (possibly truncated)."""
    name: str
    path: str
    text: str
    original_chars: int

    @property
    def truncated(self) -> bool:
        """Whether the file was cut at the size limit."""
        return len(self.text) != self.original_chars


@dataclass(frozen=True)
class Persona:
    """A persona agent: its files, in the order they make the system prompt."""
    agent: str
    files: tuple[PersonaFile, ...]

    def system_text(self) -> str:
        """The persona part of the system context, files in the fixed order (each its own
        heading: no file-name comments, which a small model pays for and does not need)."""
        return "\n\n".join(f.text.strip() for f in self.files if f.text.strip())


def workspace_persona(workspace: Path, dirs: tuple[Path, ...],
                      env: Mapping[str, str]) -> Path | None:
    """The workspace's own ``persona/`` among ``dirs``, when it is there, not the bundled
    one (a source checkout of Lily) and not the folder the user named (LILY_PERSONA_DIR),
    else None."""
    own = workspace / "persona"
    if env.get("LILY_PERSONA_DIR") or own not in dirs or not own.is_dir():
        return None
    from lily_kernel.skills.paths import bundled
    return None if own.resolve() == bundled("persona").resolve() else own


def usable(workspace: Path, dirs: tuple[Path, ...], env: Mapping[str, str],
           trusted: Callable[[], bool]) -> tuple[Path, ...]:
    """``dirs`` without the workspace's own ``persona/`` unless ``trusted()`` (asked only
    when there is one)."""
    own = workspace_persona(workspace, dirs, env)
    if own is None or trusted():
        return dirs
    return tuple(d for d in dirs if d != own)


def list_agents(dirs: tuple[Path, ...]) -> list[str]:
    """The persona agents found in ``dirs`` (the default one always)."""
    names = {DEFAULT_AGENT}
    for d in dirs:
        agents = d / "agents"
        try:
            names.update(p.name for p in agents.iterdir()
                         if p.is_dir() and not p.name.startswith("."))
        except OSError:
            continue
    return sorted(names)


def cap(text: str, limit: int = MAX_FILE_CHARS, name: str = "file") -> str:
    """Keep the head and tail of ``text`` around a visible marker when it is too long."""
    if len(text) <= limit:
        return text
    marker = f"\n\n[… {name}: {len(text) - limit} characters cut here to fit the {limit}-character cap …]\n\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + marker + (text[-tail:] if tail else "")


def load(agent: str, dirs: tuple[Path, ...], limit: int = MAX_FILE_CHARS) -> Persona:
    """Load persona ``agent`` from ``dirs``; PersonaError when there is none."""
    if agent != DEFAULT_AGENT and agent not in list_agents(dirs):
        raise PersonaError(f"no agent named '{agent}'")
    layers = ([d / "agents" / agent for d in dirs] if agent != DEFAULT_AGENT else []) + list(dirs)
    files = []
    for fname in PERSONA_FILES:
        for layer in layers:
            path = layer / fname
            try:
                text = path.read_text(encoding="utf-8-sig", errors="replace")
            except OSError:
                continue
            files.append(PersonaFile(fname, str(path), cap(text, limit, fname), len(text)))
            break
    return Persona(agent, tuple(files))
