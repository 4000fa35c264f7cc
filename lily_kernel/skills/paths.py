"""Where things live: the bundled data, the skill roots, the workspace.

The bundled skills and default persona sit at the top of the repository and
are copied into ``lily_kernel/_bundled/`` in the wheel; a source checkout or
editable install reads them in place.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parent.parent  # lily_kernel/

# Every root's source name, highest precedence first (docs/loader.md#roots): the project
# before the user before what ships with Lily; at each level Lily's own folder first, then
# the folders other agents read (the Agent Skills client guide's `.agents/skills`, Claude
# Code's `.claude/skills`, OpenClaw's `~/.openclaw/skills`). Last, Lily's example skills
# (the typed messaging skills), only when ``SKILLS_EXAMPLES`` turns them on.
SOURCES = ("workspace", "workspace-agents", "workspace-claude",
           "user", "user-agents", "user-openclaw", "bundled", "examples")
_ON = ("1", "true", "yes", "on")
#: The sources of the workspace's own roots: a default one (no variable names it) waits for
#: workspace trust (docs/trust-boundary.md#workspace-trust).
WORKSPACE_SOURCES = ("workspace", "workspace-agents", "workspace-claude")
# Where each root lies when no variable sets it: (base, folder under it).
COMPAT_ROOTS = (("workspace-agents", "workspace", ".agents/skills"),
                ("workspace-claude", "workspace", ".claude/skills"),
                ("user-agents", "home", ".agents/skills"),
                ("user-openclaw", "home", ".openclaw/skills"))


def bundled(name: str) -> Path:
    """The bundled folder ``name`` (skills, examples, persona, kernelspec)."""
    installed = _PACKAGE / "_bundled" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name


@dataclass(frozen=True)
class Root:
    """One folder of skill folders, and the source name its skills carry."""

    source: str  # one of SOURCES
    path: Path
    explicit: bool  # configured by an environment variable: a missing root is an error

    def as_dict(self) -> dict[str, Any]:
        """The root as JSON data."""
        return {"source": self.source, "path": str(self.path), "explicit": self.explicit}


def workspace_dir(env: Mapping[str, str] | None = None) -> Path:
    """``LILY_WORKSPACE``, else ``KERNEL_WORKING_DIR`` when it names a folder that exists
    here (a gateway's convention; docs/front-ends.md#remote-kernels), else the cwd."""
    env = os.environ if env is None else env
    if env.get("LILY_WORKSPACE"):
        return Path(env["LILY_WORKSPACE"])
    gateway = env.get("KERNEL_WORKING_DIR")
    if gateway and Path(gateway).expanduser().is_dir():
        return Path(gateway).expanduser()
    return Path(os.getcwd())


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """``HOME`` from ``env`` when it has one (a session's own environment), else the user's."""
    env = os.environ if env is None else env
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def shared_workspace(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``LILY_SHARED_WORKSPACE`` says the workspace is on a volume several hosts
    write (set by the Enterprise Gateway kernelspecs; docs/deploy.md#shared-workspace)."""
    env = os.environ if env is None else env
    return env.get("LILY_SHARED_WORKSPACE", "").strip().lower() in ("1", "true", "yes", "on")


def skill_roots(env: Mapping[str, str] | None = None, workspace: Path | None = None) -> tuple[Root, ...]:
    """Every root, highest precedence first (the order of SOURCES), from the environment.

    ``SKILLS_COMPAT_ROOTS=0`` leaves out the other agents' folders; ``SKILLS_EXAMPLES=1``
    adds Lily's example skills (``examples/skills``), off by default, and
    ``SKILLS_EXAMPLES_DIR`` names another folder for them (docs/loader.md#roots).
    """
    env = os.environ if env is None else env
    workspace = workspace if workspace is not None else workspace_dir(env)
    home = home_dir(env)

    def root(source: str, var: str, default: Path) -> Root:
        value = env.get(var)
        if value:
            return Root(source, Path(value).expanduser(), True)
        return Root(source, default, False)

    roots = {
        "workspace": root("workspace", "SKILLS_WORKSPACE_DIR", workspace / "skills"),
        "user": root("user", "SKILLS_USER_DIR", home / ".lily" / "skills"),
        "bundled": root("bundled", "SKILLS_BUNDLED_DIR", bundled("skills")),
    }
    if env.get("SKILLS_EXAMPLES_DIR"):
        roots["examples"] = root("examples", "SKILLS_EXAMPLES_DIR", Path())
    elif env.get("SKILLS_EXAMPLES", "").strip().lower() in _ON:
        roots["examples"] = Root("examples", bundled("examples") / "skills", False)
    if env.get("SKILLS_COMPAT_ROOTS", "1") != "0":
        for source, base, folder in COMPAT_ROOTS:
            roots[source] = Root(source, (workspace if base == "workspace" else home) / folder,
                                 False)
    return tuple(roots[s] for s in SOURCES if s in roots)


def untrusted_roots(roots: tuple[Root, ...]) -> frozenset[str]:
    """The sources of ``roots`` that hold the workspace's own skills, which load only in a
    trusted workspace: a workspace root no variable names (``skills/``, ``.agents/skills``,
    ``.claude/skills`` of the workspace), that exists and is not the same folder as a root
    of the user's or Lily's bundle (a source checkout run in place: its ``skills/`` is the
    bundle). A root a variable names (``SKILLS_WORKSPACE_DIR``) is the user's own choice."""
    found = []
    for r in roots:
        if r.source in WORKSPACE_SOURCES and not r.explicit:
            try:
                st = os.stat(r.path)  # (one stat: a missing default root costs nothing more)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                    found.append((r.source, (st.st_dev, st.st_ino)))
    if not found:
        return frozenset()
    others = set()
    for r in roots:
        if r.source not in WORKSPACE_SOURCES:
            try:
                st = os.stat(r.path)
            except OSError:
                continue
            others.add((st.st_dev, st.st_ino))
    return frozenset(source for source, key in found if key not in others)


def workspace_skill_dirs(workspace: Path) -> tuple[Path, ...]:
    """The skill roots a workspace holds by default (protected from the model's file tools
    wherever a variable points the roots: docs/trust-boundary.md#protected-paths)."""
    return (workspace / "skills", *(workspace / folder for _, base, folder in COMPAT_ROOTS
                                    if base == "workspace"))


def persona_dirs(workspace: Path, env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Persona folders, highest priority first: workspace (or LILY_PERSONA_DIR), bundled."""
    env = os.environ if env is None else env
    override = env.get("LILY_PERSONA_DIR")
    first = Path(override).expanduser() if override else workspace / "persona"
    shipped = bundled("persona")
    return (first, shipped) if first.resolve() != shipped.resolve() else (shipped,)
