"""Tools every session starts with, confined to the session's workspace.

``read``, ``write`` and ``list`` are the workspace file tools; ``scan_todos``
backs the ``todo_scan`` skill (``/todos``) and ``compile_plan`` turns notes into
the plan format of seed 000 without a model; both serve deterministic
``tool_dispatch`` skills. Paths are relative to the workspace; ``..``, absolute paths and
symlinks that lead outside it are refused.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from lily_kernel.agent.tools import ToolError, ToolRegistry

MAX_READ_CHARS = 100_000
SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__",
             ".ipynb_checkpoints", ".lily", ".mypy_cache", ".pytest_cache", ".tox",
             "build", "dist"}
TODO_RE = re.compile(r"\b(TODO|FIXME|XXX|HACK)\b(?:\([^)]*\))?(?::|\s|$)\s*(.*)")
MAX_SCAN_BYTES = 1_000_000


def confine(workspace: Path, relpath: str) -> Path:
    """Resolve ``relpath`` inside ``workspace`` or raise :class:`ToolError`."""
    if not isinstance(relpath, str):
        raise ToolError("path must be a string")
    rel = relpath.strip() or "."
    if os.path.isabs(rel) or rel.startswith("~"):
        raise ToolError(f"path '{relpath}' is absolute; use a path relative to the workspace")
    if ".." in Path(rel).parts:
        raise ToolError(f"path '{relpath}' contains '..'; paths must stay inside the workspace")
    root = workspace.resolve()
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        raise ToolError(f"path '{relpath}' leads outside the workspace (through a symlink)")
    return target


def register_builtins(registry: ToolRegistry, workspace: Path) -> None:
    """Add the built-in tools, bound to ``workspace``, to ``registry``."""

    @registry.register(name="read")
    def read_file(path: str) -> str:
        """Read a UTF-8 text file in the workspace. `path` is relative to the workspace."""
        target = confine(workspace, path)
        try:
            text = target.read_text(encoding="utf-8", errors="replace")
        except IsADirectoryError:
            raise ToolError(f"'{path}' is a folder; use the list tool") from None
        except OSError as exc:
            raise ToolError(f"cannot read '{path}': {exc.strerror or exc}") from None
        if len(text) > MAX_READ_CHARS:
            text = text[:MAX_READ_CHARS] + f"\n[… truncated at {MAX_READ_CHARS} characters …]"
        return text

    @registry.register(name="write")
    def write_file(path: str, content: str) -> str:
        """Write a UTF-8 text file in the workspace, creating folders as needed."""
        target = confine(workspace, path)
        if target == workspace.resolve():
            raise ToolError("cannot write to the workspace folder itself")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        except OSError as exc:
            raise ToolError(f"cannot write '{path}': {exc.strerror or exc}") from None
        return f"wrote {len(content)} characters to {path}"

    @registry.register(name="list")
    def list_files(path: str = ".") -> str:
        """List a folder in the workspace (folders end with '/')."""
        target = confine(workspace, path)
        try:
            entries = sorted(os.scandir(target), key=lambda e: e.name)
        except OSError as exc:
            raise ToolError(f"cannot list '{path}': {exc.strerror or exc}") from None
        return "\n".join(e.name + ("/" if e.is_dir() else "") for e in entries)

    @registry.register(name="scan_todos")
    def scan_todos(input: str = "") -> str:
        """Find TODO, FIXME, XXX and HACK markers in the workspace's text files.

        `input` is an optional folder or file relative to the workspace. Returns
        a Markdown table of file, line and note, in path order.
        """
        start = confine(workspace, input.strip().splitlines()[0] if input.strip() else ".")
        root = workspace.resolve()
        hits = list(_scan(start))
        where = os.path.relpath(start, root)
        if not hits:
            return f"No TODO, FIXME, XXX or HACK markers under `{where}`."
        lines = [f"**{len(hits)} marker{'s' if len(hits) != 1 else ''}** under `{where}`:", "",
                 "| file | line | marker | note |", "| --- | ---: | --- | --- |"]
        for path, lineno, tag, note in hits:
            rel = os.path.relpath(path, root)
            note = note.strip().replace("|", "\\|")[:120]
            lines.append(f"| `{rel}` | {lineno} | {tag} | {note} |")
        return "\n".join(lines)

    registry.register(compile_plan)


_CONSTRAINT_RE = re.compile(r"^(constraints?:|must\b|must not\b|never\b|do not\b|don't\b|"
                            r"without\b|no more than\b|at most\b|at least\b|only\b)", re.I)
_PHASE_RE = re.compile(r"^(#+\s*|phase\b[^:]*:\s*)(.*)$", re.I)
_BULLET_RE = re.compile(r"^([-*+]|\d+[.)]|\[[ xX]\])\s+")


def compile_plan(input: str = "") -> str:
    """Compile notes into a plan: Objective, Constraints, Phases, Steps (seed 000's format).

    The first line is the objective. Lines that start like a constraint ("must",
    "never", "without", "constraint:" ...) are constraints. Headings ("## ...")
    or "Phase ...:" lines open a phase; every other line is a step of the
    current phase. Deterministic: the same notes give the same plan.
    """
    lines = [l.strip() for l in input.splitlines() if l.strip()]
    if not lines:
        raise ToolError("give the notes to compile, e.g. /plan followed by the goal and steps "
                        "on the next lines")
    objective = _BULLET_RE.sub("", lines[0]).rstrip(".") + "."
    constraints: list[str] = []
    phases: list[tuple[str, list[str]]] = []
    for line in lines[1:]:
        text = _BULLET_RE.sub("", line)
        phase = _PHASE_RE.match(text)
        if phase and (text.startswith("#") or text.lower().startswith("phase")):
            phases.append((phase.group(2).strip().rstrip(":") or f"Phase {len(phases) + 1}", []))
        elif _CONSTRAINT_RE.match(text):
            constraints.append(re.sub(r"^constraints?:\s*", "", text, flags=re.I))
        else:
            if not phases:
                phases.append(("Do the work", []))
            phases[-1][1].append(text)
    out = ["# Plan", "", "## Objective", objective, "", "## Constraints"]
    out += [f"- {c}" for c in constraints] or ["- (none stated)"]
    out += ["", "## Phases"]
    out += [f"{i}. {name} ({len(steps)} step{'s' if len(steps) != 1 else ''})"
            for i, (name, steps) in enumerate(phases, 1)] or ["1. (no steps given)"]
    out += ["", "## Steps"]
    for i, (name, steps) in enumerate(phases, 1):
        out += [f"- [ ] {i}.{j} {step}" for j, step in enumerate(steps, 1)]
    if not any(steps for _, steps in phases):
        out.append("- [ ] Break the objective into steps")
    return "\n".join(out)


def _scan(start: Path):
    if start.is_file():
        yield from _scan_file(start)
        return
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            yield from _scan_file(Path(dirpath) / name)


def _scan_file(path: Path):
    try:
        if path.is_symlink() or path.stat().st_size > MAX_SCAN_BYTES:
            return
        data = path.read_bytes()
    except OSError:
        return
    if b"\0" in data[:4096]:
        return
    text = data.decode("utf-8", errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        m = TODO_RE.search(line)
        if m:
            yield path, lineno, m.group(1), m.group(2)
