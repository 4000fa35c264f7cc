"""Where things live: the bundled data, the skill roots, the workspace.

The bundled skills and default persona sit at the top of the repository and
are copied into ``lily_kernel/_bundled/`` in the wheel; a source checkout or
editable install reads them in place.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

_PACKAGE = Path(__file__).resolve().parent.parent  # lily_kernel/

SOURCES = ("workspace", "user", "bundled")  # highest precedence first


def bundled(name: str) -> Path:
    """The bundled folder ``name`` (skills, persona, kernelspec)."""
    installed = _PACKAGE / "_bundled" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name


@dataclass(frozen=True)
class Root:
    source: str  # workspace | user | bundled
    path: Path
    explicit: bool  # configured by an environment variable: a missing root is an error

    def as_dict(self) -> dict:
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


def shared_workspace(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``LILY_SHARED_WORKSPACE`` says the workspace is on a volume several hosts
    write (set by the Enterprise Gateway kernelspecs; docs/deploy.md#shared-workspace)."""
    env = os.environ if env is None else env
    return env.get("LILY_SHARED_WORKSPACE", "").strip().lower() in ("1", "true", "yes", "on")


def skill_roots(env: Mapping[str, str] | None = None, workspace: Path | None = None) -> tuple[Root, ...]:
    """The three roots, highest precedence first, from the environment."""
    env = os.environ if env is None else env
    workspace = workspace if workspace is not None else workspace_dir(env)

    def root(source: str, var: str, default: Path) -> Root:
        value = env.get(var)
        if value:
            return Root(source, Path(value).expanduser(), True)
        return Root(source, default, False)

    return (
        root("workspace", "SKILLS_WORKSPACE_DIR", workspace / "skills"),
        root("user", "SKILLS_USER_DIR", Path("~/.lily/skills").expanduser()),
        root("bundled", "SKILLS_BUNDLED_DIR", bundled("skills")),
    )


def persona_dirs(workspace: Path, env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Persona folders, highest priority first: workspace (or LILY_PERSONA_DIR), bundled."""
    env = os.environ if env is None else env
    override = env.get("LILY_PERSONA_DIR")
    first = Path(override).expanduser() if override else workspace / "persona"
    shipped = bundled("persona")
    return (first, shipped) if first.resolve() != shipped.resolve() else (shipped,)
