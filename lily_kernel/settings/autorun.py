"""Files that something runs or imports by itself: a write of one always asks.

A new ``conftest.py`` runs at the next ``pytest``, a workflow at the next push, a module
named like one the kernel imports (``json.py`` or ``_strptime.py`` in the workspace, which
is ``sys.path[0]`` for ``python -m ...``) at the next start. Such a write asks in every
mode, and the card says why (docs/permissions.md#files-that-run-by-themselves). Lily's own
files and the places Python runs at start-up are refused outright before this is asked
(tools/protected.py).

The set is derived from how Python and common tools start, not kept as a list of module
names: every top-level name importable at kernel start (each ``sys.path`` entry but the
workspace, built-in and standard-library modules, private ``_names`` included), the files
the interpreter, pdb, pytest, pip's build, make, git, direnv, editors and Jupyter read when
they start, and the file ``PYTHONSTARTUP`` names. Names are compared as the file system
may treat them as one (:func:`fold`), on the safe side.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import unicodedata
from functools import lru_cache
from pathlib import Path

_SHELL = "a shell runs it at start"
_PYTEST = "pytest reads it at start and loads the plugins it names (-p, addopts)"
#: Names that run at any depth: (folded name, what runs it).
BY_NAME: dict[str, str] = {
    "conftest.py": "pytest imports it when it collects tests",
    "sitecustomize.py": "Python runs it at every start",
    "usercustomize.py": "Python runs it at every start",
    "setup.py": "pip and setuptools run it when the folder is installed or built",
    "pyproject.toml": ("pip runs its build backend when the folder is installed (an in-tree "
                       "one with [build-system] backend-path), and pytest loads the plugins "
                       "it names"),
    "setup.cfg": f"{_PYTEST}; setuptools reads its entry points",
    "pytest.ini": _PYTEST, ".pytest.ini": _PYTEST,
    "tox.ini": f"tox runs the commands it names; {_PYTEST}",
    ".coveragerc": "coverage imports the plugins it names",
    "noxfile.py": "nox runs it",
    ".pdbrc": "pdb runs its commands when it starts (python -m pdb, breakpoint())",
    ".pdbrc.py": "pdb runs it when it starts (pdb++)",
    ".pythonrc": "an interactive Python runs it at start when PYTHONSTARTUP names it",
    ".pythonrc.py": "an interactive Python runs it at start when PYTHONSTARTUP names it",
    "makefile": "make runs it", "gnumakefile": "make runs it",
    "package.json": "npm runs its install scripts",
    ".gitattributes": "git runs the filters and diff drivers it names",
    ".gitmodules": "git clones what it names on submodule update",
    ".gitlab-ci.yml": "GitLab CI runs it on the next push",
    ".travis.yml": "Travis CI runs it on the next push",
    "jenkinsfile": "Jenkins runs it on the next push",
    ".pre-commit-config.yaml": "pre-commit runs the hooks it names at the next commit",
    ".envrc": "direnv runs it when a shell enters the folder",
    ".env": "direnv, editors and containers load its variables (PYTHONPATH, LD_PRELOAD) "
            "into what they start",
    ".bashrc": _SHELL, ".bash_profile": _SHELL, ".bash_login": _SHELL, ".profile": _SHELL,
    ".zshrc": _SHELL, ".zshenv": _SHELL, ".zprofile": _SHELL, ".zlogin": _SHELL,
    ".kshrc": _SHELL, ".cshrc": _SHELL, ".tcshrc": _SHELL,
    "ipython_config.py": "IPython runs it at start",
    "ipython_kernel_config.py": "IPython runs it at start",
}
#: Folders whose files run (folded components, what runs them), at any depth.
BY_FOLDER: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".github", "workflows"), "GitHub Actions runs it on the next push"),
    ((".circleci",), "CircleCI runs it on the next push"),
    ((".git",), "git runs its hooks and reads its configuration"),
    ((".hg",), "Mercurial runs the hooks its hgrc names"),
    ((".vscode",), "VS Code runs its tasks and applies its settings when the folder opens"),
    ((".idea",), "JetBrains IDEs run its run configurations and apply its settings"),
    ((".devcontainer",), "a dev container runs its commands when the folder opens"),
    ((".ipython",), "IPython runs its profiles and start-up files"),
    ((".jupyter",), "Jupyter reads and runs its configuration"),
    (("__pycache__",), "Python runs cached byte code in place of its source"),
)
#: Suffixes of files Python imports as modules.
CODE_SUFFIXES = (".py", ".pyw", ".pyc", ".so", ".pyd")


def fold(name: str) -> str:
    """A component as it is compared: NFKC (canonical and compatibility forms, so NFD, NFC
    and fullwidth spell one name), case-folded, without the trailing dots and spaces
    Windows drops: every spelling a file system could treat as the same file, and more."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return folded.rstrip(". ") or folded


def _in_workspace(entry: str) -> bool:
    """Whether the ``sys.path`` entry is the workspace's own code: the workspace (the
    kernel's folder) or a folder inside it that is not installed packages (an editable
    install of the project the user works on, its ``src/``). What is found only there
    shadows nothing; a virtual environment kept in the workspace still counts."""
    if entry in ("", "."):
        return True
    here = os.path.realpath(os.getcwd())
    real = os.path.realpath(entry)
    if real == here:
        return True
    installed = {"site-packages", "dist-packages"} & set(real.split(os.sep))
    return real.startswith(here.rstrip(os.sep) + os.sep) and not installed


def _top_level(entry: str) -> set[str]:
    """The top-level names a ``sys.path`` entry offers: its code files and every folder
    named like a module (a regular or a namespace package); a zip or egg through pkgutil."""
    import pkgutil
    if not os.path.isdir(entry):
        with contextlib.suppress(Exception):  # an unreadable archive: nothing from it
            return {m.name for m in pkgutil.iter_modules([entry])}
        return set()
    names = set()
    with contextlib.suppress(OSError), os.scandir(entry) as found:
        for item in found:
            name = item.name
            if name.endswith(CODE_SUFFIXES):
                names.add(name.split(".", 1)[0])
            elif name.isidentifier() and item.is_dir():
                names.add(name)
    return names


@lru_cache(maxsize=1)
def importable() -> frozenset[str]:
    """Top-level module names the kernel can import, private ``_names`` included: every
    module and package (namespace packages too) of each ``sys.path`` entry outside the
    workspace, the standard library, built-in modules, what is imported now, and Lily's
    own. Read once, from the folders themselves (no distribution's metadata is parsed)."""
    names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    names |= {name.partition(".")[0] for name in list(sys.modules)}
    for entry in sys.path:
        if not _in_workspace(entry):
            names |= _top_level(entry)
    names |= {"lily", "lily_kernel"}
    return frozenset(fold(n) for n in names if n)


def _startup_name() -> str | None:
    """The file ``PYTHONSTARTUP`` names (its name, folded), or None."""
    named = os.environ.get("PYTHONSTARTUP", "").strip()
    return fold(os.path.basename(named.rstrip("/\\"))) if named else None


def _module(parts: tuple[str, ...]) -> str | None:
    """The top-level module a code file at ``parts`` would provide, or None."""
    name = parts[-1]
    if not name.endswith(CODE_SUFFIXES):
        return None
    return parts[0] if len(parts) > 1 else name.split(".", 1)[0]


_PLUGIN = re.compile(r"(?:^|[\s'\"=\[,])-p\s*([A-Za-z_][\w.]*)")
_CONFIG_BYTES = 256 * 1024


def _text(workspace: Path, name: str) -> str:
    try:
        with open(workspace / name, "rb") as f:
            return f.read(_CONFIG_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def declared(workspace: Path) -> dict[tuple[tuple[str, ...], str], str]:
    """Modules the workspace's own configuration makes a tool import, as (folder parts,
    top-level module name) -> what imports it: pytest plugins named with ``-p`` in its
    configuration files, and an in-tree build backend (``pyproject.toml`` ``[build-system]
    build-backend`` found on ``backend-path``)."""
    import tomllib
    found: dict[tuple[tuple[str, ...], str], str] = {}
    for name in ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"):
        for plugin in _PLUGIN.findall(_text(workspace, name)):
            found[((), fold(plugin.split(".")[0]))] = f"pytest loads it as a plugin ({name})"
    try:
        build = tomllib.loads(_text(workspace, "pyproject.toml")).get("build-system", {})
    except (tomllib.TOMLDecodeError, AttributeError):
        build = {}
    backend, where = build.get("build-backend"), build.get("backend-path")
    if isinstance(backend, str) and isinstance(where, list):
        top = fold(backend.split(":")[0].split(".")[0])
        for folder in where:
            if isinstance(folder, str):
                parts = tuple(fold(p) for p in folder.replace("\\", "/").split("/")
                              if p not in ("", "."))
                found[(parts, top)] = ("pip runs it as the in-tree build backend "
                                       "(pyproject.toml backend-path)")
    return found


def reason(path: str, workspace: Path | None = None) -> str | None:
    """Why a write to workspace ``path`` (relative, '/'-separated) plants code that runs by
    itself, or None for an ordinary file. ``workspace``: where the modules its own
    configuration names are looked up (:func:`declared`)."""
    given = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    parts = tuple(f for f in (fold(p) for p in given) if f not in ("", "."))
    if not parts:
        return None
    shown = "/".join(given)
    name = parts[-1]
    if name in BY_NAME:
        return f"'{shown}' runs by itself: {BY_NAME[name]}"
    if name.endswith(".pth"):
        return f"'{shown}' runs by itself: Python runs its import lines at every start"
    if name == _startup_name():
        return (f"'{shown}' runs by itself: an interactive Python runs it at start "
                "(PYTHONSTARTUP names it)")
    if name.startswith("jupyter_") and name.endswith(("_config.py", "_config.json")):
        return f"'{shown}' runs by itself: Jupyter reads it at start"
    if any(p.startswith("profile_") for p in parts[:-1]) and "startup" in parts[:-1]:
        return f"'{shown}' runs by itself: IPython runs its start-up files"
    for folder, what in BY_FOLDER:
        for i in range(len(parts) - len(folder)):
            if parts[i:i + len(folder)] == folder:
                return f"'{shown}' runs by itself: {what}"
    if workspace is not None:
        for (where, top), what in declared(workspace).items():
            rest = parts[len(where):]
            if parts[:len(where)] == where and rest and _module(rest) == top:
                return f"'{shown}' runs by itself: {what}"
    module = _module(parts)
    if module and module in importable():
        return (f"'{shown}' runs by itself: it shadows the module '{module}', which Python "
                "imports from the workspace first")
    return None
