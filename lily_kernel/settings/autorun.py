"""Files that something runs or imports by itself: a write of one always asks.

A new ``conftest.py`` runs at the next ``pytest``, a workflow at the next push, a module
named like one the kernel imports (``json.py`` in the workspace, which is ``sys.path[0]``
for ``python -m ...``) at the next start. Such a write asks in every mode, and the card
says why (docs/permissions.md#files-that-run-by-themselves). Lily's own files and the places
Python runs at start-up are refused outright before this is asked (tools/protected.py).
Names are compared NFC-normalised and case-folded, on the safe side.
"""
from __future__ import annotations

import contextlib
import sys
import unicodedata
from functools import lru_cache

#: Names that run at any depth: (folded name, what runs it).
BY_NAME: dict[str, str] = {
    "conftest.py": "pytest imports it when it collects tests",
    "sitecustomize.py": "Python runs it at every start",
    "usercustomize.py": "Python runs it at every start",
    "setup.py": "pip and setuptools run it when the folder is installed or built",
    "noxfile.py": "nox runs it",
    "makefile": "make runs it", "gnumakefile": "make runs it",
    ".gitlab-ci.yml": "GitLab CI runs it on the next push",
    ".pre-commit-config.yaml": "pre-commit runs the hooks it names at the next commit",
    ".envrc": "direnv runs it when a shell enters the folder",
    "tox.ini": "tox runs the commands it names",
    ".bashrc": "a shell runs it at start", ".bash_profile": "a shell runs it at start",
    ".bash_login": "a shell runs it at start", ".profile": "a shell runs it at start",
    ".zshrc": "a shell runs it at start", ".zshenv": "a shell runs it at start",
    ".zprofile": "a shell runs it at start", ".zlogin": "a shell runs it at start",
    ".kshrc": "a shell runs it at start", ".cshrc": "a shell runs it at start",
    ".tcshrc": "a shell runs it at start",
    "ipython_config.py": "IPython runs it at start",
    "ipython_kernel_config.py": "IPython runs it at start",
}
#: Folders whose files run (folded components, what runs them).
BY_FOLDER: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".github", "workflows"), "GitHub Actions runs it on the next push"),
    ((".git", "hooks"), "git runs it"),
    ((".vscode",), "VS Code runs its tasks and applies its settings when the folder opens"),
    ((".ipython",), "IPython runs its profiles and start-up files"),
    ((".jupyter",), "Jupyter reads and runs its configuration"),
)


def fold(name: str) -> str:
    """A component as it is compared: NFC, case-folded."""
    return unicodedata.normalize("NFC", name).casefold()


@lru_cache(maxsize=1)
def importable() -> frozenset[str]:
    """Top-level module names the kernel can import: the standard library, built-in
    modules, every installed distribution's packages and what is imported now."""
    from importlib.metadata import packages_distributions
    names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    with contextlib.suppress(Exception):  # a broken distribution's metadata: the rest count
        names |= set(packages_distributions())
    names |= {name.partition(".")[0] for name in list(sys.modules)}
    names |= {"lily", "lily_kernel"}
    return frozenset(fold(n) for n in names if n and not n.startswith("_"))


def reason(path: str) -> str | None:
    """Why a write to workspace ``path`` (relative, '/'-separated) plants code that runs by
    itself, or None for an ordinary file."""
    parts = tuple(fold(p) for p in path.replace("\\", "/").split("/") if p not in ("", "."))
    if not parts:
        return None
    shown = "/".join(parts)
    name = parts[-1]
    if name in BY_NAME:
        return f"'{shown}' runs by itself: {BY_NAME[name]}"
    if name.endswith(".pth"):
        return f"'{shown}' runs by itself: Python runs its import lines at every start"
    if name.startswith("jupyter_") and name.endswith(("_config.py", "_config.json")):
        return f"'{shown}' runs by itself: Jupyter reads it at start"
    if any(p.startswith("profile_") for p in parts[:-1]) and "startup" in parts[:-1]:
        return f"'{shown}' runs by itself: IPython runs its start-up files"
    for folder, what in BY_FOLDER:
        for i in range(len(parts) - len(folder)):
            if parts[i:i + len(folder)] == folder:
                return f"'{shown}' runs by itself: {what}"
    top = parts[0]
    module = top[:-3] if len(parts) == 1 and top.endswith(".py") else (
        top if len(parts) > 1 and name.endswith((".py", ".pyc", ".so", ".pth")) else None)
    if module and module in importable():
        return (f"'{shown}' runs by itself: it shadows the module '{module}', which Python "
                "imports from the workspace first")
    return None
