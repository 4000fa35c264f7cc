"""Protected paths: what no model-callable tool may list, read or write.

``.lily/`` (journal, Config Registry, outbox store), ``lily.toml``, ``contacts.yaml``, the
persona folders and every skill root, wherever they lie inside the workspace, every
``.git`` at any depth (hooks git runs later, remote credentials), and the places where code
runs by itself (``site-packages``, ``*.pth``, ``sitecustomize.py``, ``.ipython``, ``.jupyter``,
``.config``, the workspace's ``.venv``/``venv``/``env``; folders holding ``pyvenv.cfg`` or
``kernel.json`` are refused by ``workspace_fs`` as it walks) -- compared on NFC,
case-folded components, lexically and after resolving symlinks, and guarded by inode as
well. Contract: docs/trust-boundary.md#protected-paths.
"""
from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lily_kernel.skills.paths import workspace_skill_dirs

GIT_DIR = ".git"
GIT_WHAT = "the repository's own data"
_RUNS = "code Python or Jupyter runs by itself"
#: Names protected at any depth because something runs what they hold without asking
#: (docs/trust-boundary.md#protected-paths): (name, is a folder, what it is).
AUTORUN_NAMES: tuple[tuple[str, bool, str], ...] = (
    ("site-packages", True, f"installed Python packages ({_RUNS})"),
    ("dist-packages", True, f"installed Python packages ({_RUNS})"),
    ("sitecustomize.py", False, f"a start-up hook ({_RUNS})"),
    ("usercustomize.py", False, f"a start-up hook ({_RUNS})"),
    ("pyvenv.cfg", False, f"a virtual environment's marker ({_RUNS})"),
    ("kernel.json", False, f"a Jupyter kernelspec ({_RUNS})"),
    (".ipython", True, f"IPython's profiles and start-up files ({_RUNS})"),
    (".jupyter", True, f"Jupyter's configuration ({_RUNS})"),
    (".config", True, f"tools' configuration ({_RUNS})"),
)
#: A file suffix protected at any depth: .pth lines starting with "import" run at start-up.
PTH_SUFFIX = ".pth"
#: The workspace's own virtual-environment folders, under their usual names.
VENV_NAMES = (".venv", "venv", "env")
#: A folder holding one of these files is protected with everything in it, at any depth.
MARKERS: tuple[tuple[str, str], ...] = (
    ("pyvenv.cfg", f"a virtual environment ({_RUNS})"),
    ("kernel.json", f"a Jupyter kernelspec ({_RUNS})"),
)


def fold(name: str) -> str:
    """A component as protected paths are compared: NFKC (NFC, NFD and fullwidth forms are
    one name), case-folded, without the trailing dots and spaces Windows drops
    (docs/trust-boundary.md#protected-paths: every spelling a disk may treat as the same
    file, on the safe side)."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return folded.rstrip(". ") or folded


@dataclass(frozen=True)
class Protected:
    """One protected path: its folded components under the root, and what it is."""

    parts: tuple[str, ...]
    shown: str  # e.g. "lily.toml", ".lily/"
    what: str   # e.g. "Lily's configuration"
    anywhere: bool = False  # a name protected at any depth (.git), not only at ``parts``
    suffix: bool = False  # ``parts[0]`` is a file suffix protected at any depth (.pth)

    def covers(self, folded: tuple[str, ...]) -> bool:
        """Whether the folded components ``folded`` are this path or lie inside it."""
        if self.suffix:
            return any(c.endswith(self.parts[0]) for c in folded)
        if folded[:len(self.parts)] == self.parts:
            return True
        return self.anywhere and self.parts[0] in folded

    def refusal(self, path: str, verb: str) -> str:
        """The refusal a tool gets for ``verb`` on ``path`` inside this protected entry."""
        if fold(path.strip("/")) == fold(self.shown.strip("/")) or not self.parts:
            return f"{self.shown} is {self.what}; tools cannot {verb} it"
        if self.suffix or (self.anywhere and not self.shown.endswith("/")
                           and fold(path.rstrip("/").rsplit("/", 1)[-1]) == self.parts[0]):
            return f"'{path}' is a {self.shown} file, {self.what}; tools cannot {verb} it"
        return f"'{path}' is inside {self.shown}, {self.what}; tools cannot {verb} it"


def _inside(root: str, path: str) -> tuple[str, ...] | None:
    """``path``'s components under ``root``: () when root lies inside path, None if apart.
    Both are absolute and normalised (plain strings: this runs at every session start)."""
    if path == root:
        return ()
    if path.startswith(root.rstrip(os.sep) + os.sep):
        return tuple(path[len(root.rstrip(os.sep)) + 1:].split(os.sep))
    if root.startswith(path.rstrip(os.sep) + os.sep):
        return ()
    return None


def policy_paths(env: Mapping[str, str]) -> list[tuple[Path, str, bool]]:
    """The files that bind the model, as (path, what, is a folder): the administrator's
    policy files and the user's configuration folder (docs/permissions.md#layers)."""
    from lily_kernel.settings import admin_policy
    from lily_kernel.settings.model_settings import user_config_path
    named = env.get(admin_policy.ENV_FILE)
    admin = [admin_policy.SYSTEM_FILE, *([Path(named).expanduser()] if named else [])]
    return [*((p, "the administrator's policy", False) for p in admin),
            (user_config_path(env).parent, "the user's Lily configuration", True)]


def protected_set(workspace: Path, persona_dirs: Iterable[Path],
                  skill_roots: Iterable[Path], data_dirs: Iterable[Path] = (),
                  policy: Iterable[tuple[Path, str, bool]] = (),
                  ) -> tuple[tuple[Protected, ...], tuple[Path, ...]]:
    """The protected paths of ``workspace`` (docs/trust-boundary.md#protected-paths), and the
    absolute paths whose inodes are guarded as well. ``data_dirs``: the user's data folder
    for Lily (the workspace trust record), protected when it lies inside the workspace.
    ``policy`` (:func:`policy_paths`): protected by name when inside the workspace and by
    identity (device and inode, its target's too) wherever it lies: another name for it
    (a bind mount, an alias of its folder) is refused as well."""
    from lily_kernel.settings.model_settings import CONFIG_FILE
    from lily_kernel.typed.contacts import CONTACTS_FILE
    data_dirs, policy = list(data_dirs), list(policy)
    items: list[tuple[Path, str, bool]] = [
        (workspace / ".lily", "Lily's state (journal, Config Registry, outbox)", True),
        (workspace / CONFIG_FILE, "Lily's configuration", False),
        (workspace / CONTACTS_FILE, "Lily's contact list", False),
        # A model writing .git/hooks/pre-commit plants code git runs later; .git/config
        # may hold a remote's credentials.
        (workspace / GIT_DIR, GIT_WHAT, True),
    ]
    # The default folders stay protected when a variable points elsewhere: another session
    # (a kernel started without the variable) would load them.
    items += [(Path(d), "a persona folder of Lily's", True)
              for d in (workspace / "persona", *persona_dirs)]
    items += [(Path(r), "a skill root of Lily's", True)
              for r in (*workspace_skill_dirs(workspace), *skill_roots)]
    # The trust record decides where secrets go: a model that could write it would trust
    # the workspace for the user (docs/trust-boundary.md#workspace-trust).
    items += [(Path(d), "Lily's data folder (the workspace trust record)", True)
              for d in data_dirs]
    items += policy
    lexical_ws, real_ws = os.path.abspath(workspace), os.path.realpath(workspace)
    found: dict[tuple[str, ...], Protected] = {}
    # what binds the model is guarded by identity wherever it lies (another name for it)
    guard: list[str] = [os.path.abspath(p) for p in (*(p for p, _, _ in policy), *data_dirs)]
    for path, what, is_dir in items:
        lexical, real = os.path.abspath(path), os.path.realpath(path)
        for base, p in ((lexical_ws, lexical), (real_ws, real)):
            parts = _inside(base, p)
            if parts is None:
                continue
            guard.append(p)
            key = tuple(fold(c) for c in parts)
            shown = ("/".join(parts) + ("/" if is_dir else "") if parts
                     else f"the {os.path.basename(base)} folder")
            found.setdefault(key, Protected(key, shown, what))
    # .git is protected at any depth as well (a nested clone's hooks run just the same).
    found[(GIT_DIR,)] = Protected((GIT_DIR,), f"{GIT_DIR}/", GIT_WHAT, anywhere=True)
    # Places where code runs by itself: a .pth or sitecustomize.py runs at every Python
    # start, a kernelspec's argv or an IPython start-up file at every kernel start.
    for name in VENV_NAMES:
        found.setdefault((name,), Protected((name,), f"{name}/",
                                            f"the workspace's virtual environment ({_RUNS})"))
    for name, is_dir, what in AUTORUN_NAMES:
        key = (fold(name),)
        found.setdefault(key, Protected(key, name + ("/" if is_dir else ""), what, anywhere=True))
    found[("*" + PTH_SUFFIX,)] = Protected((PTH_SUFFIX,), "*" + PTH_SUFFIX,
                                           f"a path configuration file ({_RUNS})", suffix=True)
    return tuple(found.values()), tuple(Path(p) for p in dict.fromkeys(guard))

