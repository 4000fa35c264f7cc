"""Persona: the agent's Markdown files, read explicitly and capped (docs/session.md#persona).

Files are looked up one by one, first hit wins:

1. ``<persona>/agents/<agent>/FILE`` in the workspace persona folder, then in the bundled one
   (only for an agent other than ``default``);
2. ``<persona>/FILE`` in the workspace persona folder, then in the bundled one.

So a workspace ``persona/`` replaces the shipped persona file by file, and a
named agent inherits whatever file it does not define from the default agent.
"""
from __future__ import annotations

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
